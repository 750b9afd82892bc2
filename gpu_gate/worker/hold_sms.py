"""An amplifier for races: a kernel that holds most of the GPU's SMs while the candidate runs.

With three quarters of the SMs busy, the candidate's programs run on the rest, in more waves and
in another order: which program takes a lock first, which partial row lands last and which of two
colliding stores wins all change. Each block of the holding kernel asks for more than half of an
SM's shared memory, so no two share an SM, and spins on the global timer for a bounded time; it
never waits on anything the candidate does, so it cannot deadlock with it, whatever the candidate
assumes about co-residency (at worst the candidate runs later). Launched through CuPy (the GPU
extra) on a stream of its own, never ordered with the caller's. Decides nothing: the determinism
check compares what comes out.
"""
from __future__ import annotations

from typing import Any

SOURCE = r"""
extern "C" __global__ void hold_sms(unsigned long long ns) {
    extern __shared__ unsigned char pad[];
    unsigned long long start, now;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(start));
    do {
        asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(now));
    } while (now - start < ns);
    if (ns == 0) pad[threadIdx.x] = 0;  // the shared memory is reserved, never used
}
"""

SHARE = 0.75  # of the SMs held
MIN_HOLD_S = 0.002
MAX_HOLD_S = 0.25


class SmHolder:
    def __init__(self) -> None:
        self._kernel: Any = None
        self._stream: Any = None
        self.blocks = 0
        self.smem = 0
        self.why_not: str | None = None

    def _ready(self) -> bool:
        if self._kernel is not None or self.why_not is not None:
            return self.why_not is None
        try:
            import cupy
            import torch

            props = torch.cuda.get_device_properties(torch.cuda.current_device())
            per_sm = int(getattr(props, "shared_memory_per_multiprocessor", 0))
            optin = int(getattr(props, "shared_memory_per_block_optin", 0))
            smem = per_sm // 2 + 1024
            if not per_sm or smem > optin:
                self.why_not = "the GPU's shared memory per SM is not known to torch"
                return False
            kernel = cupy.RawKernel(SOURCE, "hold_sms")
            kernel.max_dynamic_shared_size_bytes = smem
            self._kernel, self.smem = kernel, smem
            self.blocks = max(1, int(props.multi_processor_count * SHARE))
            self._stream = torch.cuda.Stream()  # type: ignore[no-untyped-call]
        except Exception as exc:  # noqa: BLE001 - no CuPy, no NVRTC: the amplifier is skipped, and said so
            self.why_not = f"the SMs could not be held ({type(exc).__name__}: {exc})"
            return False
        return True

    def hold(self, seconds: float) -> bool:
        """Hold the SMs for ``seconds`` (bounded), starting now; whether it could."""
        if not self._ready():
            return False
        import cupy

        from .nvrtc import cupy_stream

        ns = int(min(MAX_HOLD_S, max(MIN_HOLD_S, seconds)) * 1e9)
        with cupy_stream(cupy, self._stream):
            self._kernel((self.blocks,), (32,), (cupy.uint64(ns),), shared_mem=self.smem)
        return True
