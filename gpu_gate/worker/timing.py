"""Timing the candidate for the speed check: the last call's case, again, ``repeats`` times.

Each timed run gets fresh copies of the case's inputs (new addresses: a kernel or wrapper that caches
by pointer, or keeps a previous result, cannot answer from it) and of the upstream gradient, made
before the clock starts; on a GPU the L2 cache is overwritten first (a buffer twice its size,
zeroed), so every run reads its inputs from memory as a training step would; then only the call is
timed, with CUDA events on the caller's stream, or the wall clock on the CPU.

On a GPU the events measure the GPU's time, not the host's: before the start event the stream is
held by a short spin on the GPU (``torch.cuda._sleep``), twice as long as the host took to queue the
call in the warm-up runs, so the call's kernels are all queued when the clock starts. Without it, a
kernel of tens of microseconds is timed as its Python wrapper's queueing, which differs between two
processes by more than the kernel does (on an H200 the same Triton kernel in the base's worker and the
head's measured 0.77x, its interval excluding 1). A wrapper that waits for the GPU itself (a
``.item()``, a synchronize) still pays for that wait, as it does in training."""
from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING

from ..protocol.messages.timing import Time, Timed

if TYPE_CHECKING:
    import torch

FLUSH_FALLBACK = 256 << 20  # bytes overwritten where the device does not say its L2 size
QUEUE_MIN_S = 1e-4  # the GPU's spin before a timed call: at least 0.1 ms ...
QUEUE_MAX_S = 0.05  # ... and at most 50 ms (a wrapper that queues for longer is timed partly as its queueing)
MAX_AGAIN = 20  # timed runs run again because the host queued them slower than the GPU spun
FALLBACK_MHZ = 2000.0  # the SM clock assumed where the driver does not say it (the spin is then longer or shorter)


def time_calls(request: Time, device: str, inputs: Mapping[str, torch.Tensor],
               run: Callable[[Mapping[str, torch.Tensor]], object],
               copy: Callable[[torch.Tensor], torch.Tensor]) -> Timed:
    """``run(inputs)`` timed ``request.repeats`` times after ``request.warmup`` untimed runs.
    ``copy``: how one input is copied to new memory (its layout kept)."""
    import torch

    flush = _flush_buffer(device) if request.flush else None
    sleep = getattr(torch.cuda, "_sleep", None) if device == "cuda" else None
    hz = (_clock_mhz(device) or FALLBACK_MHZ) * 1e6
    queueing = QUEUE_MIN_S  # the longest the host took to queue one call, so far
    warmup = max(1, request.warmup)
    seconds: list[float] = []
    runs = again = 0
    while len(seconds) < request.repeats:
        given = {k: copy(v) for k, v in inputs.items()} if request.fresh else dict(inputs)
        if device == "cuda":
            if flush is not None:
                flush.zero_()
            spin = min(QUEUE_MAX_S, 2 * queueing)
            if sleep is not None:
                sleep(int(spin * hz))
            start = torch.cuda.Event(enable_timing=True)  # type: ignore[no-untyped-call]  # torch's stub
            end = torch.cuda.Event(enable_timing=True)  # type: ignore[no-untyped-call]
            start.record()
            t0 = time.perf_counter()
            run(given)
            queued = time.perf_counter() - t0
            end.record()
            end.synchronize()
            took = start.elapsed_time(end) / 1e3
            # The host took longer to queue the call than the GPU spun: the GPU waited for the host, and
            # this run's figure is partly the host's. Spin longer, and run it again (a few times at most).
            late = sleep is not None and queued > spin and spin < QUEUE_MAX_S
            queueing = max(queueing, queued)
        else:
            t0 = time.perf_counter()
            run(given)
            took = time.perf_counter() - t0
            late = False
        runs += 1
        del given
        if runs <= warmup:
            continue
        if late and again < MAX_AGAIN:
            again += 1
            continue
        seconds.append(max(took, 1e-9))
    return Timed(tuple(seconds), "cuda-events" if device == "cuda" else "wall", _clock_mhz(device),
                 0 if flush is None else int(flush.numel()))


def _flush_buffer(device: str) -> torch.Tensor | None:
    if device != "cuda":
        return None
    import torch

    props = torch.cuda.get_device_properties(torch.cuda.current_device())
    l2 = int(getattr(props, "L2_cache_size", 0) or 0)
    return torch.empty(2 * l2 if l2 > 0 else FLUSH_FALLBACK, dtype=torch.uint8, device="cuda")


def _clock_mhz(device: str) -> float | None:
    """The SM clock now, where the driver says it (through NVML)."""
    if device != "cuda":
        return None
    try:
        import torch

        return float(torch.cuda.clock_rate())
    except Exception:  # noqa: BLE001 - no NVML binding, or a driver that does not say: not reported
        return None
