"""What the hardware allows: the shortest time a call can take, from the bytes it must move and the GPU's
peak memory bandwidth (the roofline's memory side), and from the operations it must do and the GPU's
peak arithmetic rate (the compute side), for the speed check's ``implausible-speedup``.

A timed call runs on fresh input buffers after the L2 cache was overwritten (``gpu_gate.worker.timing``),
so its outputs are new bytes that leave the GPU's L2 for its memory once they outgrow it: writing them
once takes at least ``(output bytes - L2 size) / peak bandwidth``. A head timed below that did not write
its outputs in the timed call (a result computed earlier, or returned from a cache). Inputs are not
counted: a gather, a sparse or an early-exit kernel legitimately reads a part of them.

The peak is the memory clock times the bus width (double data rate), read from PyTorch's device
properties, else from NVML; where neither says, there is no floor (and the note says so). Trusted code:
the judge reads the device's properties, never a worker's word on them.

The compute side: the operations are what the spec's reference does on the case as torch's FLOP counter
counts them (matrix products, convolutions, attention; elementwise work counts 0, so the count is a lower
bound), asked of the reference worker, which runs the base's trusted spec. The peak is the SMs times the
highest SM clock (NVML, else PyTorch) times the most operations one SM does per clock on operands of the
case's width, from NVIDIA's published dense peaks (:data:`PER_SM_CLOCK`): 8-bit floats at the FP8 (or
INT8) tensor-core rate, 16-bit at the FP16/BF16 rate, wider at the TF32 rate, which is above what float32
or float64 arithmetic can do. A head faster than that skipped the work (a matrix product that is not
computed, or one computed at lower precision than the case's dtype allows is the equivalence check's).
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


# FLOPs per SM per clock (a fused multiply-add counts 2), dense, of the fastest unit that takes operands
# of each width: (8-bit, 16-bit, wider). Each is NVIDIA's published dense tensor-core peak of a part of
# that architecture divided by its SMs and boost clock, rounded up to a power of two (V100 125 TFLOP/s
# FP16 on 80 SMs at 1.53 GHz: 1021; A100 312 on 108 at 1.41: 2048; H100 SXM 989 BF16 and 1979 FP8 on 132
# at 1.83: 4096 and 8192; B200 2250 BF16 on 148 at 1.97: 7737). Volta and Turing have no TF32: their
# wider rate is their FP16 tensor rate, which no float32 kernel can beat.
PER_SM_CLOCK: dict[tuple[int, int], tuple[int, int, int]] = {
    (7, 0): (1024, 1024, 1024),
    (7, 2): (1024, 1024, 1024),
    (7, 5): (2048, 1024, 1024),
    (8, 0): (4096, 2048, 1024),
    (8, 6): (2048, 1024, 512),
    (8, 7): (2048, 1024, 512),
    (8, 9): (2048, 1024, 512),
    (9, 0): (8192, 4096, 2048),
    (10, 0): (16384, 8192, 4096),
    (10, 3): (16384, 8192, 4096),
    (12, 0): (4096, 2048, 1024),
}
WIDTHS = ("8-bit", "16-bit", "32- or 64-bit")


def width_of(dtype: str) -> int:
    """The index into :data:`PER_SM_CLOCK`'s rates for operands of ``dtype``."""
    if dtype.startswith("float8"):
        return 0
    return 1 if dtype in ("float16", "bfloat16") else 2


@dataclasses.dataclass(frozen=True)
class Compute:
    """The GPU's arithmetic, as the compute floor needs it."""
    sms: int
    clock_hz: float  # the SMs' highest clock
    arch: tuple[int, int]
    source: str

    def peak(self, dtype: str) -> float:
        """The most floating-point operations per second on operands of ``dtype``."""
        return self.sms * self.clock_hz * PER_SM_CLOCK[self.arch][width_of(dtype)]

    def describe(self, dtype: str) -> str:
        w = width_of(dtype)
        return (f"{self.peak(dtype) / 1e12:.0f} TFLOP/s on {WIDTHS[w]} operands: {self.sms} SMs at "
                f"{self.clock_hz / 1e6:.0f} MHz x {PER_SM_CLOCK[self.arch][w]} per SM and clock, "
                f"sm_{self.arch[0]}{self.arch[1]} ({self.source})")


# A reference may do work a kernel rightly skips: the masked half of a causal attention's products, a
# product of a sparse pattern computed dense, a recomputation. The compute floor counts this fraction
# of the reference's operations, so a kernel that skips that much and runs at its GPU's peak is still
# above it; what stays below skipped most of the work.
COUNTED = 0.25


def compute_floor_s(flops: int, dtype: str, compute: Compute) -> float:
    """The shortest time a kernel can take for a reference that does ``flops`` operations on operands of
    ``dtype``: :data:`COUNTED` of them at the peak rate."""
    return COUNTED * flops / compute.peak(dtype) if flops > 0 else 0.0


def compute_or_why(device_index: int = 0) -> tuple[Compute | None, str]:
    """The current GPU's arithmetic figures, or None and why they cannot be known."""
    try:
        import torch

        props = torch.cuda.get_device_properties(device_index)
    except Exception as exc:  # noqa: BLE001 - any failure: the figures are unknown, and said why
        return None, f"PyTorch cannot read the GPU's properties ({type(exc).__name__}: {str(exc)[:200]})"
    return compute_from(props, _nvml_sm_clock_khz(device_index))


def compute_from(props: object, nvml_clock_khz: int) -> tuple[Compute | None, str]:
    """:func:`compute_or_why` from PyTorch's device properties and NVML's highest SM clock (0: unknown)."""
    arch = (int(getattr(props, "major", 0) or 0), int(getattr(props, "minor", 0) or 0))
    sms = int(getattr(props, "multi_processor_count", 0) or 0)
    if arch not in PER_SM_CLOCK:
        return None, f"no published arithmetic peak is known to gpu-gate for sm_{arch[0]}{arch[1]}"
    torch_khz = int(getattr(props, "clock_rate", 0) or 0)
    khz, source = (nvml_clock_khz, "NVML's highest SM clock") if nvml_clock_khz else (
        torch_khz, "PyTorch's device properties")
    if not (sms and khz):
        return None, "neither NVML nor PyTorch says the SMs' count and clock"
    return Compute(sms=sms, clock_hz=khz * 1e3, arch=arch, source=source), ""


def _nvml_sm_clock_khz(device_index: int) -> int:
    try:
        import pynvml

        pynvml.nvmlInit()
        try:
            h = pynvml.nvmlDeviceGetHandleByIndex(device_index)
            return int(pynvml.nvmlDeviceGetMaxClockInfo(h, pynvml.NVML_CLOCK_SM)) * 1000
        finally:
            pynvml.nvmlShutdown()
    except Exception:
        return 0
