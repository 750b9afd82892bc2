"""A producer for the inputs a spec names in ``producer=``: a kernel that writes them just before
the candidate reads them, the way the previous layer's kernel does in the library.

Races between kernels stay hidden while every input is ready long before the call, as the
judge's inputs always are. Here each named input's buffer is first filled with 0xFF (NaN in every
float dtype, an index far out of range), then a kernel of gpu-gate's own copies the case's values
back into it. That kernel lets dependent grids start at once (``griddepcontrol.launch_dependents``
on sm_90 and later) and waits a while before it copies, so:

- ``stream``: the producer runs on the caller's stream and the candidate is called right after it,
  with no wait in between. A kernel launched with programmatic dependent launch may start while the
  producer still runs: one that reads before ``griddepcontrol.wait`` (``tl.extra.cuda.gdc_wait()``,
  ``cudaGridDependencySynchronize()``) reads the 0xFF fill. Without it, stream order holds;
- ``event``: the producer runs on another stream; the caller's stream waits on an event recorded
  after it, as a framework's stream of prefetches does. A candidate that does its work on a stream
  of its own without waiting for the caller's reads the fill.

The producer never waits on anything the candidate does, so it cannot deadlock with it. Launched
through CuPy (the GPU extra). Decides nothing: the determinism check compares what comes out.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import torch

SOURCE = r"""
extern "C" __global__ void gg_produce(const unsigned char* src, unsigned char* dst, unsigned long long n,
                                      unsigned long long wait_ns) {
#if __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.launch_dependents;");
#endif
    unsigned long long start, now;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(start));
    do {
        asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(now));
    } while (now - start < wait_ns);
    unsigned long long i = blockIdx.x * (unsigned long long)blockDim.x + threadIdx.x;
    unsigned long long step = (unsigned long long)gridDim.x * blockDim.x;
    unsigned long long vec = (((unsigned long long)src | (unsigned long long)dst) % 16 == 0) ? n / 16 : 0;
    const uint4* s4 = (const uint4*)src;
    uint4* d4 = (uint4*)dst;
    for (unsigned long long k = i; k < vec; k += step) d4[k] = s4[k];
    for (unsigned long long k = vec * 16 + i; k < n; k += step) dst[k] = src[k];
}
"""

BLOCKS = 16  # few: the candidate's programs find room beside the producer's
THREADS = 256
MIN_WAIT_S = 0.0005
MAX_WAIT_S = 0.05
MODES = ("stream", "event")


class Producer:
    def __init__(self) -> None:
        self._kernel: Any = None
        self._side: Any = None
        self.why_not: str | None = None

    def _ready(self) -> bool:
        if self._kernel is not None or self.why_not is not None:
            return self.why_not is None
        try:
            import cupy
            import torch

            self._kernel = cupy.RawKernel(SOURCE, "gg_produce")
            compile_now = getattr(self._kernel, "compile", None)  # else on its first launch
            if compile_now is not None:
                compile_now()
            self._side = torch.cuda.Stream()  # type: ignore[no-untyped-call]
        except Exception as exc:  # noqa: BLE001 - no CuPy, no NVRTC: the runs are skipped, and said so
            self._kernel = None
            self.why_not = f"no producer kernel ({type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''})"
            return False
        return True

    def write(self, pairs: list[tuple[torch.Tensor, torch.Tensor]], mode: str, seconds: float) -> bool:
        """Fill each ``dst`` with 0xFF, then copy ``src`` into it with the producer kernel, queued on
        the caller's stream (``stream``) or on another one that the caller's then waits for
        (``event``). ``pairs``: (dst, src) uint8 tensors of the same size. Whether it could."""
        if mode not in MODES:
            raise ValueError(f"unknown producer mode {mode!r}")
        if not self._ready():
            return False
        import cupy
        import torch

        from .nvrtc import cupy_stream

        wait_ns = int(min(MAX_WAIT_S, max(MIN_WAIT_S, seconds)) * 1e9)
        caller = torch.cuda.current_stream()
        stream = caller if mode == "stream" else self._side
        if mode == "event":
            stream.wait_stream(caller)  # the inputs' last writes are the caller's
        try:
            with torch.cuda.stream(stream), cupy_stream(cupy, stream):
                for dst, src in pairs:
                    dst.fill_(0xFF)
                    self._kernel((BLOCKS,), (THREADS,), (cupy.uint64(src.data_ptr()), cupy.uint64(dst.data_ptr()),
                                                         cupy.uint64(dst.numel()), cupy.uint64(wait_ns)))
        except Exception as exc:  # noqa: BLE001 - the kernel did not launch: the inputs go back as they were
            torch.cuda.synchronize()
            for dst, src in pairs:
                dst.copy_(src)
            torch.cuda.synchronize()
            self.why_not = f"the producer kernel did not launch ({type(exc).__name__}: {exc})"
            return False
        if mode == "event":
            caller.wait_event(stream.record_event())
            for dst, src in pairs:
                dst.record_stream(caller)
                src.record_stream(stream)
        return True
