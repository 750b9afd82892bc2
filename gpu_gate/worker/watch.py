"""What the candidate's worker watches while the candidate runs: the output buffers it allocates
with ``gg.empty`` (guarded and NaN-poisoned; a plain ``torch.empty`` outside a worker) and the
streams it makes current. Worker side: it reports, the judge decides."""
from __future__ import annotations

import sys
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from ..protocol.guard import Guarded, contiguous_stride, guarded_strided, poison_value

if TYPE_CHECKING:
    from typing import TypeVar

    import torch

    _T = TypeVar("_T")

_active = threading.local()


class OutputWatch:
    """Collects the guarded outputs a candidate allocates with ``gg.empty`` during one call.

    ``exact``: under compute-sanitizer, ``gg.empty`` allocates exactly the tensor's bytes, with no
    guard band, so that the tool sees a write past its end (a guard band would hide it).
    ``quiet``: ``gg.empty`` is a plain ``torch.empty``, launching no fill: nothing of gpu-gate's
    comes between a producer kernel and the candidate's (see gpu_gate.worker.producer)."""

    def __init__(self, exact: bool = False, quiet: bool = False) -> None:
        self.outputs: list[Guarded] = []
        self.exact = exact
        self.quiet = quiet

    def __enter__(self) -> OutputWatch:
        _active.watch = self
        return self

    def __exit__(self, *exc: object) -> None:
        _active.watch = None


def guarded_empty(shape: tuple[Any, ...], *, dtype: torch.dtype | None = None,
                  device: torch.device | str | int | None = None) -> Any:  # a torch.Tensor (Guarded.view)
    import torch

    if len(shape) == 1 and isinstance(shape[0], (tuple, list, torch.Size)):
        shape = tuple(shape[0])
    shape = tuple(int(s) for s in shape)
    dtype = dtype or torch.get_default_dtype()
    watch: OutputWatch | None = getattr(_active, "watch", None)
    if watch is None or watch.quiet:
        return torch.empty(shape, dtype=dtype, device=device)
    if watch.exact:
        return torch.empty(shape, dtype=dtype, device=device).fill_(poison_value(dtype))
    g = guarded_strided(f"output{len(watch.outputs)}", shape, contiguous_stride(shape), 0, dtype, device)
    g.view.fill_(poison_value(dtype))
    watch.outputs.append(g)
    return g.view


# About 25 ms on a 2 GHz clock: far longer than the Python between a candidate's switch to
# another stream and the worker's copy on the caller's stream once the call returns.
SIDE_STREAM_DELAY_CYCLES = 50_000_000


class SideStreams:
    """While a candidate runs on CUDA, each switch to a stream other than the caller's first
    queues a GPU sleep on that stream (``torch.cuda.stream``, ``torch.cuda.set_stream`` and
    ``with stream:`` are watched), and so does making a CuPy stream current (``with s:``,
    ``s.use()``), where CuPy's own kernels launch. A ``gg.cuda`` kernel launched with an
    explicit ``stream=`` (a torch or CuPy stream) other than the caller's gets the same sleep
    before its first launch there in the call (:func:`before_launch`).

    Work the candidate then queues there finishes well after the call returns, unless the
    caller's stream waits for it. The worker copies every output on the caller's stream
    straight after the call and compares the copy with the output once the device is idle: a
    result finished later on an unordered side stream differs every time, instead of only when
    the scheduler happens to run late. A candidate that orders its streams correctly loses a
    few milliseconds and nothing else.

    ``delay=False``: the streams are counted, and nothing is queued on them (a producer's runs,
    where the sleep would let the producer finish before a candidate's unordered stream reads).
    """

    def __init__(self, device: str, delay: bool = True) -> None:
        self.device = device
        self.delay = delay
        self.used: set[int] = set()
        self._undo: list[Callable[[], object]] = []
        self._launching_on: Callable[[int], None] | None = None

    def __enter__(self) -> SideStreams:
        if self.device != "cuda":
            return self
        import torch

        if not hasattr(torch.cuda, "_sleep"):
            return self
        sleep = torch.cuda._sleep if self.delay else (lambda cycles: None)
        caller = torch.cuda.current_stream()
        set_stream = torch.cuda.set_stream

        def switched(stream: torch.cuda.Stream | None) -> None:
            if stream is not None and getattr(stream, "stream_id", None) != caller.stream_id:
                self.used.add(int(stream.stream_id))
                sleep(SIDE_STREAM_DELAY_CYCLES)  # queued on the stream just made current

        def watched_set_stream(stream: torch.cuda.Stream) -> None:
            set_stream(stream)
            switched(stream)

        delayed: set[int] = set()

        def launching_on(handle: int) -> None:
            if handle == caller.cuda_stream or handle in delayed:
                return  # one sleep per stream and call delays everything queued after it there
            delayed.add(handle)
            target = torch.cuda.ExternalStream(handle)  # type: ignore[no-untyped-call]
            self.used.add(int(target.stream_id))
            current = torch.cuda.current_stream()
            set_stream(target)
            try:
                sleep(SIDE_STREAM_DELAY_CYCLES)
            finally:
                set_stream(current)

        raw: Callable[..., None] | None = getattr(torch._C, "_cuda_setStream", None)
        if raw is not None:
            # Every way torch makes a stream current (torch.cuda.set_stream, torch.cuda.stream,
            # ``with stream:``) ends in this one function, and so does a candidate that calls it
            # directly: watching it watches them all.
            def watched_raw(*args: int, **kwargs: int) -> None:  # stream_id, device_index, device_type
                result = raw(*args, **kwargs)
                sid = kwargs.get("stream_id", args[0] if args else None)
                if sid is not None and sid != caller.stream_id and sid not in self.used:
                    self.used.add(int(sid))
                    sleep(SIDE_STREAM_DELAY_CYCLES)  # queued on the stream just made current
                return result

            torch._C._cuda_setStream = watched_raw
            self._undo.append(lambda: setattr(torch._C, "_cuda_setStream", raw))
        else:
            torch.cuda.set_stream = watched_set_stream
            self._undo.append(lambda: setattr(torch.cuda, "set_stream", set_stream))
            self._wrap(torch.cuda.Stream, "__enter__", switched)  # absent from CPU builds of torch
        cupy = sys.modules.get("cupy")  # imported by gg.cuda, or by the candidate's own code
        if cupy is not None:
            # CuPy launches (RawKernel, elementwise) go on CuPy's current stream: entering a
            # stream or calling .use() makes it current.
            for name in ("__enter__", "use"):
                self._wrap(cupy.cuda.Stream, name, lambda stream: launching_on(int(stream.ptr)))
        self._launching_on = launching_on
        _active.side_streams = self
        self._undo.append(lambda: setattr(_active, "side_streams", None))
        return self

    def _wrap(self, cls: type[_T], name: str, after: Callable[[_T], None]) -> None:
        """Make ``cls.name`` call ``after(self)`` once it has run, until the watch ends."""
        inherited = getattr(cls, name, None)
        if inherited is None:
            return
        own = cls.__dict__.get(name)

        def wrapped(obj: _T, *args: object, **kwargs: object) -> object:
            result = inherited(obj, *args, **kwargs)
            after(obj)
            return result

        setattr(cls, name, wrapped)
        self._undo.append(lambda: delattr(cls, name) if own is None else setattr(cls, name, own))

    def __exit__(self, *exc: object) -> None:
        while self._undo:
            self._undo.pop()()


def before_launch(stream_handle: int) -> None:
    """Called by a ``gg.cuda`` kernel about to launch on an explicitly given stream (its raw
    ``cudaStream_t``): while a candidate runs under :class:`SideStreams`, a stream other than the
    caller's is delayed like one switched to. Outside a worker it does nothing."""
    side: SideStreams | None = getattr(_active, "side_streams", None)
    if side is not None and side._launching_on is not None:
        side._launching_on(int(stream_handle))
