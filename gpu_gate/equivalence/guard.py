"""Guard bands: every tensor the harness hands a candidate lives inside a larger buffer
whose edges hold a canary byte pattern. Writes past a tensor's end change the canary.

``gg.empty``/``gg.empty_like`` give a candidate NaN-poisoned, guarded output buffers;
outside the harness they are plain ``torch.empty``.
"""
from __future__ import annotations

import dataclasses
import sys
import threading
from collections.abc import Callable
from typing import Any

GUARD_BYTES = 4096  # a multiple of 256 keeps every view 256-byte aligned
CANARY = 0xA5

_active = threading.local()


@dataclasses.dataclass
class Guarded:
    name: str
    buffer: Any  # uint8 torch tensor: [guard | storage | padding to 256 bytes | guard]
    view: Any  # the tensor handed out
    nbytes: int = 0  # bytes of storage the view may touch

    def guards_intact(self) -> bool:
        head = self.buffer[:GUARD_BYTES]
        tail = self.buffer[GUARD_BYTES + self.nbytes:]  # the padding counts as guard too
        return bool(((head == CANARY).all() & (tail == CANARY).all()).item())

    def storage_span(self) -> tuple[int, int]:
        start = self.buffer.data_ptr() + GUARD_BYTES
        return start, self.buffer.data_ptr() + self.buffer.numel() - GUARD_BYTES


def geometry(g: Guarded) -> dict[str, object]:
    """How the view sits in its guarded buffer: enough to rebuild it around the same bytes."""
    import torch

    itemsize = torch.empty((), dtype=g.view.dtype).element_size()
    offset = g.view.storage_offset() - GUARD_BYTES // itemsize if g.nbytes else 0
    return {"shape": list(g.view.shape), "stride": list(g.view.stride()), "offset": offset,
            "dtype": str(g.view.dtype).removeprefix("torch."), "nbytes": g.nbytes}


def guarded_from(name: str, buf: object, geo: dict[str, object]) -> Guarded:
    """The guarded tensor ``geometry`` describes, around ``buf`` (a uint8 buffer of guard, storage,
    padding, guard): the candidate's copy of an input the judge built."""
    import torch

    dtype = getattr(torch, str(geo["dtype"]))
    shape = tuple(int(x) for x in geo["shape"])  # type: ignore[attr-defined]
    stride = tuple(int(x) for x in geo["stride"])  # type: ignore[attr-defined]
    nbytes = int(geo["nbytes"])  # type: ignore[call-overload]
    assert isinstance(buf, torch.Tensor)
    if not nbytes:
        return Guarded(name, buf, torch.empty(shape, dtype=dtype, device=buf.device), 0)
    flat = buf[GUARD_BYTES:GUARD_BYTES + nbytes].view(dtype)
    view = flat.as_strided(shape, stride, flat.storage_offset() + int(geo["offset"]))  # type: ignore[call-overload]
    return Guarded(name, buf, view, nbytes)


def canary_intact(head: object, tail: object) -> bool:
    """Whether the guard bytes read back from a buffer still hold the canary."""
    return all(set(bytes(part)) <= {CANARY} for part in (head, tail))  # type: ignore[call-overload]


def _storage_elems(shape: tuple[int, ...], stride: tuple[int, ...], offset: int) -> int:
    if any(s == 0 for s in shape):
        return offset
    return offset + 1 + sum((n - 1) * st for n, st in zip(shape, stride))


def guarded_strided(name: str, shape: tuple[int, ...], stride: tuple[int, ...], offset: int, dtype: Any,
                    device: Any) -> Guarded:
    import torch

    itemsize = torch.empty((), dtype=dtype).element_size()
    elems = _storage_elems(shape, stride, offset)
    nbytes = elems * itemsize
    padded = -(-nbytes // 256) * 256
    buf = torch.full((GUARD_BYTES * 2 + padded,), CANARY, dtype=torch.uint8, device=device)
    storage = buf[GUARD_BYTES:GUARD_BYTES + padded]
    if padded > nbytes:
        storage[nbytes:].fill_(CANARY)
    flat = storage[:nbytes].view(dtype) if nbytes else torch.empty(0, dtype=dtype, device=device)
    # as_strided takes an absolute storage offset: count from where the storage region starts
    view = flat.as_strided(shape, stride, flat.storage_offset() + offset) if nbytes else \
        torch.empty(shape, dtype=dtype, device=device)
    return Guarded(name, buf, view, nbytes)


def contiguous_stride(shape: tuple[int, ...]) -> tuple[int, ...]:
    stride, acc = [], 1
    for n in reversed(shape):
        stride.append(acc)
        acc *= max(n, 1)
    return tuple(reversed(stride))


def poison_value(dtype: Any) -> Any:
    import torch

    if dtype.is_floating_point or dtype.is_complex:
        return float("nan")
    if dtype == torch.bool:
        return True
    return torch.iinfo(dtype).max


class OutputWatch:
    """Collects the guarded outputs a candidate allocates with ``gg.empty`` during one call."""

    def __init__(self) -> None:
        self.outputs: list[Guarded] = []

    def __enter__(self) -> OutputWatch:
        _active.watch = self
        return self

    def __exit__(self, *exc: object) -> None:
        _active.watch = None


def guarded_empty(shape: tuple[Any, ...], *, dtype: Any = None, device: Any = None) -> Any:
    import torch

    if len(shape) == 1 and isinstance(shape[0], (tuple, list, torch.Size)):
        shape = tuple(shape[0])
    shape = tuple(int(s) for s in shape)
    dtype = dtype or torch.get_default_dtype()
    watch: OutputWatch | None = getattr(_active, "watch", None)
    if watch is None:
        return torch.empty(shape, dtype=dtype, device=device)
    g = guarded_strided(f"output{len(watch.outputs)}", shape, contiguous_stride(shape), 0, dtype, device)
    g.view.fill_(poison_value(dtype))
    watch.outputs.append(g)
    return g.view


# About 25 ms on a 2 GHz clock: far longer than the Python between a candidate's switch to
# another stream and the harness's copy on the caller's stream once the call returns.
SIDE_STREAM_DELAY_CYCLES = 50_000_000


class SideStreams:
    """While a candidate runs on CUDA, each switch to a stream other than the caller's first
    queues a GPU sleep on that stream (``torch.cuda.stream``, ``torch.cuda.set_stream`` and
    ``with stream:`` are watched), and so does making a CuPy stream current (``with s:``,
    ``s.use()``), where CuPy's own kernels launch. A ``gg.cuda`` kernel launched with an
    explicit ``stream=`` (a torch or CuPy stream) other than the caller's gets the same sleep
    before its first launch there in the call (:func:`before_launch`).

    Work the candidate then queues there finishes well after the call returns, unless the
    caller's stream waits for it. The harness copies every output on the caller's stream
    straight after the call and compares the copy with the output once the device is idle: a
    result finished later on an unordered side stream differs every time, instead of only when
    the scheduler happens to run late. A candidate that orders its streams correctly loses a
    few milliseconds and nothing else.
    """

    def __init__(self, device: str) -> None:
        self.device = device
        self.used: set[int] = set()
        self._undo: list[Any] = []
        self._launching_on: Any = None

    def __enter__(self) -> SideStreams:
        if self.device != "cuda":
            return self
        import torch

        if not hasattr(torch.cuda, "_sleep"):
            return self
        caller = torch.cuda.current_stream()
        set_stream = torch.cuda.set_stream

        def switched(stream: Any) -> None:
            if stream is not None and getattr(stream, "stream_id", None) != caller.stream_id:
                self.used.add(int(stream.stream_id))
                torch.cuda._sleep(SIDE_STREAM_DELAY_CYCLES)  # queued on the stream just made current

        def watched_set_stream(stream: Any) -> None:
            set_stream(stream)
            switched(stream)

        delayed: set[int] = set()

        def launching_on(handle: int) -> None:
            if handle == caller.cuda_stream or handle in delayed:
                return  # one sleep per stream and call delays everything queued after it there
            delayed.add(handle)
            target = torch.cuda.ExternalStream(handle)
            self.used.add(int(target.stream_id))
            current = torch.cuda.current_stream()
            set_stream(target)
            try:
                torch.cuda._sleep(SIDE_STREAM_DELAY_CYCLES)
            finally:
                set_stream(current)

        raw = getattr(torch._C, "_cuda_setStream", None)
        if raw is not None:
            # Every way torch makes a stream current (torch.cuda.set_stream, torch.cuda.stream,
            # ``with stream:``) ends in this one function, and so does a candidate that calls it
            # directly: watching it watches them all.
            def watched_raw(*args: Any, **kwargs: Any) -> Any:
                result = raw(*args, **kwargs)
                sid = kwargs.get("stream_id", args[0] if args else None)
                if sid is not None and sid != caller.stream_id and sid not in self.used:
                    self.used.add(int(sid))
                    torch.cuda._sleep(SIDE_STREAM_DELAY_CYCLES)  # queued on the stream just made current
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

    def _wrap(self, cls: Any, name: str, after: Callable[[Any], None]) -> None:
        """Make ``cls.name`` call ``after(self)`` once it has run, until the watch ends."""
        inherited = getattr(cls, name, None)
        if inherited is None:
            return
        own = cls.__dict__.get(name)

        def wrapped(obj: Any, *args: Any, **kwargs: Any) -> Any:
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
    caller's is delayed like one switched to. Outside the harness it does nothing."""
    side: SideStreams | None = getattr(_active, "side_streams", None)
    if side is not None and side._launching_on is not None:
        side._launching_on(int(stream_handle))
