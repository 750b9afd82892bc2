"""What the hardware allows: the shortest time a call can take, from the bytes it must move and the GPU's
peak memory bandwidth (the roofline's memory side), for the speed check's ``implausible-speedup``.

A timed call runs on fresh input buffers after the L2 cache was overwritten (``gpu_gate.worker.timing``),
so its outputs are new bytes that leave the GPU's L2 for its memory once they outgrow it: writing them
once takes at least ``(output bytes - L2 size) / peak bandwidth``. A head timed below that did not write
its outputs in the timed call (a result computed earlier, or returned from a cache). Inputs are not
counted: a gather, a sparse or an early-exit kernel legitimately reads a part of them.

The peak is the memory clock times the bus width (double data rate), read from PyTorch's device
properties, else from NVML; where neither says, there is no floor (and the note says so). Trusted code:
the judge reads the device's properties, never a worker's word on them.
"""
from __future__ import annotations

import dataclasses


@dataclasses.dataclass(frozen=True)
class Memory:
    """The GPU's memory, as the floor needs it: peak bandwidth (bytes/s), L2 size (bytes), and where the
    figures came from."""
    bandwidth: float
    l2_bytes: int
    source: str

    def describe(self) -> str:
        return f"{self.bandwidth / 1e12:.2f} TB/s peak, {self.l2_bytes >> 20} MiB L2 ({self.source})"


def write_floor_s(output_bytes: int, memory: Memory) -> float:
    """The shortest time in which ``output_bytes`` of new outputs can be written, L2 absorbing what fits."""
    return max(0, output_bytes - memory.l2_bytes) / memory.bandwidth


def memory(device_index: int = 0) -> Memory | None:
    """The current GPU's memory figures, or None where they cannot be read."""
    return memory_or_why(device_index)[0]


def memory_or_why(device_index: int = 0) -> tuple[Memory | None, str]:
    """:func:`memory`, and where it is None, why."""
    try:
        import torch

        props = torch.cuda.get_device_properties(device_index)
    except Exception as exc:  # noqa: BLE001 - any failure: the figures are unknown, and said why
        # (NVML has no L2 size: without it, a kernel whose outputs stay in L2 would look impossible)
        return None, f"PyTorch cannot read the GPU's properties ({type(exc).__name__}: {str(exc)[:200]})"
    l2 = int(getattr(props, "L2_cache_size", 0) or 0)
    clock_khz = int(getattr(props, "memory_clock_rate", 0) or 0)
    bus_bits = int(getattr(props, "memory_bus_width", 0) or 0)
    source = "PyTorch's device properties"
    if not (clock_khz and bus_bits):
        got, why = _from_nvml(device_index, "PyTorch's device properties have no memory clock or bus width")
        return (dataclasses.replace(got, l2_bytes=l2) if got is not None else None), why
    return Memory(bandwidth=2.0 * clock_khz * 1e3 * bus_bits / 8, l2_bytes=l2, source=source), ""


def _from_nvml(device_index: int, before: str) -> tuple[Memory | None, str]:
    clock_khz, bus_bits, source = _nvml(device_index)
    if not (clock_khz and bus_bits):
        return None, f"{before}, and NVML none either"
    return Memory(bandwidth=2.0 * clock_khz * 1e3 * bus_bits / 8, l2_bytes=0, source=source), ""


def _nvml(device_index: int) -> tuple[int, int, str]:
    try:
        import pynvml

        pynvml.nvmlInit()
        try:
            h = pynvml.nvmlDeviceGetHandleByIndex(device_index)
            mhz = pynvml.nvmlDeviceGetMaxClockInfo(h, pynvml.NVML_CLOCK_MEM)
            bits = pynvml.nvmlDeviceGetMemoryBusWidth(h)
        finally:
            pynvml.nvmlShutdown()
        return int(mhz) * 1000, int(bits), "NVML"
    except Exception:
        return 0, 0, ""
