"""Guard bands: every tensor a candidate is handed lives inside a larger buffer whose edges
hold a canary byte pattern. Writes past a tensor's end change the canary. The judge builds these
buffers and reads their guard bytes back; the candidate's worker rebuilds them around the same
bytes (:func:`guarded_from`). What watches the candidate while it runs is the worker's
(:mod:`gpu_gate.worker.watch`).
"""
from __future__ import annotations

import dataclasses
from typing import Any

GUARD_BYTES = 4096  # a multiple of 256 keeps every view 256-byte aligned
CANARY = 0xA5



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
