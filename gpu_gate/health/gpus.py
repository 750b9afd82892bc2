"""The GPUs' own health, from NVML (:mod:`gpu_gate.nvml`): temperature, free memory, clock slowdowns,
ECC and row remapping, other processes holding memory. A fraction of a second; the tools' probes
(:mod:`.tools`) take seconds."""
from __future__ import annotations

import dataclasses
import os
from collections.abc import Sequence
from typing import Any

from .. import nvml
from .model import NO_GPU, GpuHealth, Thresholds

MIB = 1024 * 1024

# Clock events that mean the GPU is being slowed by the hardware: results and
# timings taken now are not trustworthy. Idle, application clocks, sync boost
# and a software power cap under load are normal operation.
BAD_THROTTLE = frozenset({"hw_slowdown", "sw_thermal_slowdown", "hw_thermal_slowdown", "hw_power_brake_slowdown"})


@dataclasses.dataclass
class GpuExam:
    """The first half of the doctor: the GPUs as NVML sees them (fast), before the tools' probes."""

    thresholds: Thresholds
    problems: list[str]
    notes: list[str]
    gpus: list[GpuHealth]
    driver: str | None
    cuda: str | None
    on_host: int
    tokens: list[str] | None


def examine_gpus(*, thresholds: Thresholds | None = None, nvml_lib: Any | None = None,
                 visible: Sequence[str] | None = None) -> GpuExam:
    """The GPUs' own health, from NVML: temperature, memory, ECC, other processes. A fraction of a
    second; the tools' probes (``complete``) take seconds."""
    t = thresholds or Thresholds()
    problems: list[str] = []
    notes: list[str] = []
    gpus: list[GpuHealth] = []
    driver = cuda = None
    on_host = 0
    tokens = list(visible) if visible is not None else visible_from_env()
    try:
        snap = nvml.snapshot(nvml_lib)
    except nvml.NvmlUnavailable as exc:
        problems.append(_no_gpu_message(exc))
    else:
        driver, cuda, on_host = snap.driver_version, snap.cuda_driver_version, len(snap.gpus)
        samples, named = _visible_samples(list(snap.gpus), tokens, problems, notes)
        gates = _other_gates() if any(s.processes for s in samples) else frozenset()
        gpus = [_judge_gpu(s, t, notes, gates) for s in samples]
        for g, cuda_id in zip(gpus, named):
            g.cuda_id = cuda_id
        if not snap.gpus:
            problems.append(f"{NO_GPU}: the driver is loaded but NVML sees no GPU (is one assigned to this runner?)")
    return GpuExam(t, problems, notes, gpus, driver, cuda, on_host, tokens)


def visible_from_env() -> list[str] | None:
    """CUDA_VISIBLE_DEVICES as a list of names; None where it is unset (every GPU is visible)."""
    raw = os.environ.get("CUDA_VISIBLE_DEVICES")
    if raw is None:
        return None
    return [v.strip() for v in raw.split(",") if v.strip() and v.strip() != "-1"]


def _visible_samples(samples: list[nvml.GpuSample], tokens: list[str] | None, problems: list[str],
                     notes: list[str]) -> tuple[list[nvml.GpuSample], list[str | None]]:
    """The GPUs named by ``tokens`` (NVML index or UUID prefix, as CUDA reads them), each with its
    name; all of them, unnamed, where there are no tokens to follow."""
    if tokens is None or not samples:
        return samples, [None] * len(samples)
    if any(tok.startswith("MIG-") for tok in tokens):
        notes.append("CUDA_VISIBLE_DEVICES names MIG instances: every GPU of the host is examined")
        return samples, [None] * len(samples)
    chosen: list[nvml.GpuSample] = []
    named: list[str | None] = []
    for tok in tokens:
        hit = next((s for s in samples if (tok.isdigit() and s.index == int(tok))
                    or (tok.startswith("GPU-") and (s.uuid or "").startswith(tok))), None)
        if hit is None:
            problems.append(f"{NO_GPU}: CUDA_VISIBLE_DEVICES names {tok!r}, which is not one of the {len(samples)} "
                            f"GPU(s) NVML sees (indices 0-{len(samples) - 1}, or a GPU UUID from `nvidia-smi -L`)")
            continue
        if hit not in chosen:
            chosen.append(hit)
            named.append(tok)
    if not tokens:
        problems.append(f"{NO_GPU}: CUDA_VISIBLE_DEVICES is empty: this runner may use none of the "
                        f"{len(samples)} GPU(s) NVML sees")
    return chosen, named


def _no_gpu_message(exc: nvml.NvmlUnavailable) -> str:
    if exc.code == nvml.ERROR_LIBRARY_NOT_FOUND:
        return (
            f"{NO_GPU}: NVML library not found ({exc.reason}: libnvidia-ml.so.1 is not loadable; install the "
            "NVIDIA driver, or start the container with the NVIDIA runtime: --gpus all / runtimeClassName: nvidia)"
        )
    if exc.code == nvml.ERROR_DRIVER_NOT_LOADED:
        return f"{NO_GPU}: the NVIDIA kernel driver is not loaded ({exc.reason}; check `nvidia-smi` and dmesg)"
    return f"{NO_GPU}: NVML could not start ({exc.reason})"



def _mib(n: int | None) -> int | None:
    return None if n is None else n // MIB


def _other_gates() -> frozenset[int]:
    """The other gates running on this runner (:func:`gpu_gate.executor.reservations.gates_on_runner`)."""
    from ..executor.reservations import gates_on_runner

    return gates_on_runner()


def _gate_of(pid: int, gates: frozenset[int]) -> int | None:
    """The other gate on this runner that started process ``pid`` (it or one of its ancestors), if any."""
    if not gates:
        return None
    hit = (nvml.ancestors(pid) | {pid}) & gates
    return min(hit) if hit else None


def _judge_gpu(s: nvml.GpuSample, t: Thresholds, notes: list[str], gates: frozenset[int] = frozenset()) -> GpuHealth:
    throttle = nvml.decode_throttle(s.throttle_mask) if s.throttle_mask is not None else []
    others: list[dict[str, Any]] = []
    for p in s.processes or ():
        entry: dict[str, Any] = {"pid": p.pid, "name": p.name, "used_memory_mib": _mib(p.used_memory)}
        if p.ancestor:
            entry["started_the_gate"] = True
        elif (gate := _gate_of(p.pid, gates)) is not None:
            entry["another_gate"] = gate
        others.append(entry)
    health = GpuHealth(
        index=s.index,
        name=s.name,
        uuid=s.uuid,
        memory_total_mib=_mib(s.memory_total),
        memory_free_mib=_mib(s.memory_free),
        temperature_c=s.temperature_c,
        throttle_reasons=throttle,
        ecc_uncorrected={"volatile": s.ecc_uncorrected_volatile, "aggregate": s.ecc_uncorrected_aggregate},
        retired_pages={"sbe": s.retired_pages_sbe, "dbe": s.retired_pages_dbe, "pending": s.retired_pages_pending},
        row_remap={
            "correctable": s.remapped_rows_correctable,
            "uncorrectable": s.remapped_rows_uncorrectable,
            "pending": s.remap_pending,
            "failure": s.remap_failure,
        },
        processes=others if s.processes is not None else None,
        unsupported=list(s.unsupported),
        problems=[],
    )
    prefix = f"GPU {s.index} ({s.name})"
    health.problems = [f"{prefix}: {p}" for p in _gpu_problems(health, s, t)]
    notes.extend(f"{prefix}: {n}" for n in _gpu_notes(health, t))
    return health


def _gpu_problems(h: GpuHealth, s: nvml.GpuSample, t: Thresholds) -> list[str]:
    out: list[str] = []
    if h.memory_free_mib is not None and h.memory_free_mib + _other_gates_mib(h) < t.min_free_memory_mib:
        out.append(f"only {h.memory_free_mib} MiB of {h.memory_total_mib} MiB memory free (need {t.min_free_memory_mib})")
    if h.temperature_c is not None and h.temperature_c > t.max_temperature_c:
        out.append(f"temperature {h.temperature_c} C is above {t.max_temperature_c} C")
    bad = [r for r in h.throttle_reasons if r in BAD_THROTTLE]
    if bad:
        out.append(f"clocks are being slowed by the hardware: {', '.join(bad)} (check cooling and power)")
    out.extend(_memory_problems(h, t))
    if not t.allow_other_processes:
        for p in h.processes or ():
            if p.get("started_the_gate"):
                continue  # it waits for the gate (a test, a script); its memory counts in the free memory above
            if p.get("another_gate"):
                continue  # another gate's job: memory is shared by reservation (executor.reservations)
            who, used = _holder(p)
            out.append(f"another process holds GPU memory: {who}, {used}; the GPU must be free for a gate run")
    out.extend(f"could not read {what} ({err})" for what, err in s.errors.items())
    return out


def _other_gates_mib(h: GpuHealth) -> int | float:
    """The memory other gates' jobs hold on the GPU now: shared by reservation, it comes back when
    their cases end, and this gate's jobs wait for it (executor.reservations) rather than leave the GPU
    out. Unknown for one of them (a driver that does not say per process): its reservation decides."""
    held = [p["used_memory_mib"] for p in h.processes or () if p.get("another_gate")]
    if any(not isinstance(m, int) for m in held):
        return float("inf")
    return sum(m for m in held if isinstance(m, int))


def _holder(p: dict[str, object]) -> tuple[str, str]:
    """A process on the GPU, as the doctor names it: ``pid N (name)``, and the memory it holds."""
    used = f"{p['used_memory_mib']} MiB" if p["used_memory_mib"] is not None else "memory"
    return f"pid {p['pid']}" + (f" ({p['name']})" if p["name"] else ""), used


def _memory_problems(h: GpuHealth, t: Thresholds) -> list[str]:
    out: list[str] = []
    vol, agg = h.ecc_uncorrected["volatile"], h.ecc_uncorrected["aggregate"]
    if vol:
        out.append(f"{vol} uncorrectable ECC error(s) since the driver loaded (drain the node and reset the GPU)")
    limit = t.max_aggregate_uncorrected_ecc
    if agg is not None and limit is not None and agg > limit:
        out.append(f"{agg} uncorrectable ECC error(s) over the GPU's life, more than {limit} allowed")
    if h.retired_pages["pending"]:
        out.append("a page retirement is pending (reset the GPU or reboot to apply it)")
    if h.row_remap["failure"]:
        out.append("row remapping failed: the GPU's memory cannot be repaired (the GPU needs service)")
    if h.row_remap["pending"]:
        out.append("a row remap is pending (reset the GPU to apply it)")
    return out


def _gpu_notes(h: GpuHealth, t: Thresholds) -> list[str]:
    out: list[str] = []
    agg = h.ecc_uncorrected["aggregate"]
    if agg and t.max_aggregate_uncorrected_ecc is None:
        out.append(f"{agg} uncorrectable ECC error(s) over the GPU's life (history; none since the driver loaded)")
    if h.unsupported:
        out.append(f"not supported by this GPU or driver: {', '.join(h.unsupported)}")
    if t.allow_other_processes and h.processes:
        out.append(f"{len(h.processes)} other compute process(es) on this GPU (allowed by the thresholds)")
    for p in h.processes or ():
        if p.get("started_the_gate") and not t.allow_other_processes:
            who, used = _holder(p)
            out.append(f"{who}, which started gpu-gate and waits for it, holds {used} of GPU memory: not counted "
                       "as another process (the free memory is checked as always)")
        elif p.get("another_gate") and not t.allow_other_processes:
            who, used = _holder(p)
            out.append(f"{who}, started by another gpu-gate run on this runner (pid {p['another_gate']}), holds "
                       f"{used} of GPU memory: the gates share the GPU's memory by reservation, so it is not counted "
                       "as a stranger's process (the free memory is checked as always)")
    return out
