"""Guard bands: every tensor the harness hands a candidate lives inside a larger buffer
whose edges hold a canary byte pattern. Writes past a tensor's end change the canary.

``gg.empty``/``gg.empty_like`` give a candidate NaN-poisoned, guarded output buffers;
outside the harness they are plain ``torch.empty``.
"""
from __future__ import annotations

import dataclasses
import threading
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
