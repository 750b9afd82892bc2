"""The one boundary to NVML (through ``pynvml`` from the nvidia-ml-py package).

Every NVML call in gpu-gate goes through :func:`snapshot`, which reads what
``doctor`` needs and returns plain data. The library is injectable: callers (and
tests) may pass any object that offers the ``pynvml`` functions they use, so every
branch can be exercised on a machine without a GPU.

NVML never creates a CUDA context, so reading it cannot disturb or hang on a GPU
that is in a bad state the way a CUDA call can.
"""
from __future__ import annotations

import dataclasses
import importlib
import os
from collections.abc import Callable
from typing import Any, TypeVar

from . import procstat

T = TypeVar("T")

# NVML's return codes and enum values are part of its stable C ABI; they are
# spelled out here so that a fake library need not define them.
ERROR_NOT_SUPPORTED = 3
ERROR_NO_PERMISSION = 4
ERROR_DRIVER_NOT_LOADED = 9
ERROR_LIBRARY_NOT_FOUND = 12
ERROR_FUNCTION_NOT_FOUND = 13
TEMPERATURE_GPU = 0
MEMORY_ERROR_UNCORRECTED = 1
VOLATILE_ECC = 0
AGGREGATE_ECC = 1
RETIRE_CAUSE_MULTIPLE_SBE = 0
RETIRE_CAUSE_DBE = 1

# Bits of nvmlDeviceGetCurrentClocksEventReasons (formerly ...ThrottleReasons).
THROTTLE_REASONS: dict[int, str] = {
    0x001: "gpu_idle",
    0x002: "applications_clocks_setting",
    0x004: "sw_power_cap",
    0x008: "hw_slowdown",
    0x010: "sync_boost",
    0x020: "sw_thermal_slowdown",
    0x040: "hw_thermal_slowdown",
    0x080: "hw_power_brake_slowdown",
    0x100: "display_clock_setting",
    0x200: "board_limit",
    0x400: "reliability",
}


class NvmlUnavailable(Exception):
    """NVML cannot be used at all: no driver, no library, no bindings."""

    def __init__(self, reason: str, code: int | None = None) -> None:
        self.reason = reason
        self.code = code
        super().__init__(reason)


@dataclasses.dataclass(frozen=True)
class GpuProcess:
    pid: int
    used_memory: int | None  # bytes; None where the driver does not say
    name: str | None = None
    ancestor: bool = False  # one of the processes that started this one (it waits for the gate)


@dataclasses.dataclass(frozen=True)
class GpuSample:
    """One GPU as NVML saw it. ``None`` means the value could not be read."""

    index: int
    name: str
    uuid: str | None
    memory_total: int | None
    memory_free: int | None
    temperature_c: int | None
    throttle_mask: int | None
    ecc_uncorrected_volatile: int | None
    ecc_uncorrected_aggregate: int | None
    retired_pages_sbe: int | None
    retired_pages_dbe: int | None
    retired_pages_pending: bool | None
    remapped_rows_correctable: int | None
    remapped_rows_uncorrectable: int | None
    remap_pending: bool | None
    remap_failure: bool | None
    processes: tuple[GpuProcess, ...] | None
    unsupported: tuple[str, ...] = ()  # queries this GPU does not support (not a problem)
    errors: dict[str, str] = dataclasses.field(default_factory=dict)  # query -> NVML error text


@dataclasses.dataclass(frozen=True)
class NvmlSnapshot:
    driver_version: str | None
    cuda_driver_version: str | None  # "13.0": the CUDA version the driver supports
    gpus: tuple[GpuSample, ...]


def load() -> Any:
    """Import ``pynvml``; a missing package is :class:`NvmlUnavailable`, not an ImportError."""
    try:
        return importlib.import_module("pynvml")
    except ImportError as exc:
        raise NvmlUnavailable(f"the nvidia-ml-py package is not installed ({exc})") from exc


def decode_throttle(mask: int) -> list[str]:
    """Names of the bits set in a clocks-event (throttle) bitmask; unknown bits as hex."""
    names = [name for bit, name in THROTTLE_REASONS.items() if mask & bit]
    unknown = mask & ~sum(THROTTLE_REASONS)
    if unknown:
        names.append(f"unknown(0x{unknown:x})")
    return names


def _code(exc: BaseException) -> int | None:
    value = getattr(exc, "value", None)
    return value if isinstance(value, int) else None


def _describe(exc: BaseException) -> str:
    text = str(exc).strip()
    return text or type(exc).__name__


def _text(value: object) -> str:
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else str(value)


def _format_cuda(version: int) -> str:
    return f"{version // 1000}.{(version % 1000) // 10}"


class _Reader:
    """Calls NVML for one GPU, sorting failures into unsupported and errors."""

    def __init__(self, lib: Any, handle: object) -> None:
        self.lib = lib
        self.handle = handle
        self.unsupported: list[str] = []
        self.errors: dict[str, str] = {}

    def get(self, what: str, call: Callable[[], T]) -> T | None:
        try:
            return call()
        except self.lib.NVMLError as exc:
            if _code(exc) in (ERROR_NOT_SUPPORTED, ERROR_FUNCTION_NOT_FOUND):
                self.unsupported.append(what)
            else:
                self.errors[what] = _describe(exc)
            return None


def _throttle(lib: Any, handle: object) -> int:
    fn = getattr(lib, "nvmlDeviceGetCurrentClocksEventReasons", None)
    if fn is None:
        fn = lib.nvmlDeviceGetCurrentClocksThrottleReasons
    return int(fn(handle))


def _processes(lib: Any, handle: object) -> tuple[GpuProcess, ...]:
    own = os.getpid()
    chain = ancestors()
    found = []
    for p in lib.nvmlDeviceGetComputeRunningProcesses(handle):
        pid = int(p.pid)
        if pid == own:
            continue
        used = getattr(p, "usedGpuMemory", None)
        found.append(GpuProcess(pid, int(used) if used is not None else None, _process_name(lib, pid),
                                ancestor=pid in chain))
    return tuple(found)


def ancestors(pid: int | None = None) -> frozenset[int]:
    """The processes that started this one (its parent, the parent's parent, ...), from /proc;
    empty where /proc cannot say."""
    out: set[int] = set()
    pid = os.getppid() if pid is None else pid
    while pid > 1 and pid not in out:
        out.add(pid)
        s = procstat.stat(pid)
        if s is None:
            break
        pid = s.ppid
    return frozenset(out)


def _process_name(lib: Any, pid: int) -> str | None:
    try:
        return _text(lib.nvmlSystemGetProcessName(pid)) or None
    except Exception:  # noqa: BLE001 - a name is only a courtesy; the pid is what matters
        return None


def _sample(lib: Any, index: int) -> GpuSample:
    handle = lib.nvmlDeviceGetHandleByIndex(index)
    r = _Reader(lib, handle)
    memory = r.get("memory", lambda: lib.nvmlDeviceGetMemoryInfo(handle))
    ecc_v = r.get("ecc (volatile)", lambda: lib.nvmlDeviceGetTotalEccErrors(handle, MEMORY_ERROR_UNCORRECTED, VOLATILE_ECC))
    ecc_a = r.get("ecc (aggregate)", lambda: lib.nvmlDeviceGetTotalEccErrors(handle, MEMORY_ERROR_UNCORRECTED, AGGREGATE_ECC))
    sbe = r.get("retired pages", lambda: len(lib.nvmlDeviceGetRetiredPages(handle, RETIRE_CAUSE_MULTIPLE_SBE)))
    dbe = r.get("retired pages", lambda: len(lib.nvmlDeviceGetRetiredPages(handle, RETIRE_CAUSE_DBE))) if sbe is not None else None
    pending = r.get("retired pages pending", lambda: bool(lib.nvmlDeviceGetRetiredPagesPendingStatus(handle)))
    remap = r.get("row remapping", lambda: tuple(int(v) for v in lib.nvmlDeviceGetRemappedRows(handle)))
    return GpuSample(
        index=index,
        name=r.get("name", lambda: _text(lib.nvmlDeviceGetName(handle))) or f"GPU {index}",
        uuid=r.get("uuid", lambda: _text(lib.nvmlDeviceGetUUID(handle))),
        memory_total=int(memory.total) if memory is not None else None,
        memory_free=int(memory.free) if memory is not None else None,
        temperature_c=r.get("temperature", lambda: int(lib.nvmlDeviceGetTemperature(handle, TEMPERATURE_GPU))),
        throttle_mask=r.get("clock event reasons", lambda: _throttle(lib, handle)),
        ecc_uncorrected_volatile=int(ecc_v) if ecc_v is not None else None,
        ecc_uncorrected_aggregate=int(ecc_a) if ecc_a is not None else None,
        retired_pages_sbe=sbe,
        retired_pages_dbe=dbe,
        retired_pages_pending=pending,
        remapped_rows_correctable=remap[0] if remap else None,
        remapped_rows_uncorrectable=remap[1] if remap else None,
        remap_pending=bool(remap[2]) if remap else None,
        remap_failure=bool(remap[3]) if remap else None,
        processes=r.get("compute processes", lambda: _processes(lib, handle)),
        unsupported=tuple(dict.fromkeys(r.unsupported)),
        errors=dict(r.errors),
    )


def _init(lib: Any) -> None:
    try:
        lib.nvmlInit()
    except lib.NVMLError as exc:
        raise NvmlUnavailable(_describe(exc), _code(exc)) from exc


def snapshot(lib: Any | None = None) -> NvmlSnapshot:
    """Read the driver and every GPU. Raises :class:`NvmlUnavailable` when NVML cannot start."""
    lib = load() if lib is None else lib
    _init(lib)
    try:
        driver = _optional(lib, lambda: _text(lib.nvmlSystemGetDriverVersion()))
        cuda = _optional(lib, lambda: _format_cuda(int(lib.nvmlSystemGetCudaDriverVersion())))
        count = int(lib.nvmlDeviceGetCount())
        return NvmlSnapshot(driver, cuda, tuple(_sample(lib, i) for i in range(count)))
    except lib.NVMLError as exc:
        raise NvmlUnavailable(_describe(exc), _code(exc)) from exc
    finally:
        _shutdown(lib)


def _optional(lib: Any, call: Callable[[], T]) -> T | None:
    try:
        return call()
    except lib.NVMLError:
        return None


def _shutdown(lib: Any) -> None:
    try:
        lib.nvmlShutdown()
    except lib.NVMLError:
        pass


def identities(lib: Any | None = None) -> list[tuple[int, str, str]]:
    """(minor number, UUID, PCI bus id) of every GPU: which ``/dev/nvidiaN`` is which GPU. Raises
    :class:`NvmlUnavailable` when NVML cannot start or say."""
    lib = load() if lib is None else lib
    _init(lib)
    try:
        out = []
        for i in range(int(lib.nvmlDeviceGetCount())):
            handle = lib.nvmlDeviceGetHandleByIndex(i)
            bus = lib.nvmlDeviceGetPciInfo(handle).busId
            out.append((int(lib.nvmlDeviceGetMinorNumber(handle)), _text(lib.nvmlDeviceGetUUID(handle)), _text(bus)))
        return out
    except lib.NVMLError as exc:
        raise NvmlUnavailable(_describe(exc), _code(exc)) from exc
    finally:
        _shutdown(lib)
