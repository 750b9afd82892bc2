"""Guard bands: every tensor a candidate is handed lives inside a larger buffer whose edges
hold a canary byte pattern. Writes past a tensor's end change the canary. The judge builds these
buffers and reads their guard bytes back; the candidate's worker rebuilds them around the same
bytes (:func:`guarded_from`). What watches the candidate while it runs is the worker's
(:mod:`gpu_gate.worker.watch`).

The canary is the two bytes ``FF 7F`` repeated from the buffer's first byte. Read as any float
type, at any element boundary (buffers and storage start at even offsets), that is a NaN: a kernel
that reads past its input's end gets NaN, which survives a multiplication by zero (an unmasked load
whose lanes a masked operand zeroes), where a small number would vanish. A single byte cannot do
both: ``0xFF`` is also what a kernel writes as NaN or -1 (such a write would leave it unchanged),
and the earlier ``0xA5`` reads as -2.9e-16 in float32. A kernel writing a canonical NaN
(``7FC00000``) or -1 (``FF...FF``) changes this pattern.
"""
from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import torch

GUARD_BYTES = 4096  # a multiple of 256 keeps every view 256-byte aligned
CANARY = bytes([0xFF, 0x7F])  # repeated from the buffer's first byte


def canary_bytes(n: int, phase: int = 0) -> bytes:
    """``n`` bytes of the canary, starting at a byte whose index in its buffer has parity ``phase``."""
    return (CANARY * (n // 2 + 2))[phase % 2:phase % 2 + n]


def _canary_tensor(n: int, phase: int, device: torch.device | str | int | None) -> torch.Tensor:
    """The canary as a uint8 tensor on ``device``, made there (a buffer may be gigabytes)."""
    import torch

    pair = torch.tensor(list(CANARY), dtype=torch.uint8, device=device)
    return pair.repeat(n // 2 + 1)[phase % 2:phase % 2 + n].contiguous()



@dataclasses.dataclass
class Guarded:
    name: str
    buffer: torch.Tensor  # uint8: [guard | storage | padding to 256 bytes | guard]
    view: torch.Tensor  # the tensor handed out
    nbytes: int = 0  # bytes of storage the view may touch

    def guards_intact(self) -> bool:
        head = self.buffer[:GUARD_BYTES]
        tail = self.buffer[GUARD_BYTES + self.nbytes:]  # the padding counts as guard too
        want_head = _canary_tensor(head.numel(), 0, head.device)
        want_tail = _canary_tensor(tail.numel(), GUARD_BYTES + self.nbytes, tail.device)
        return bool(((head == want_head).all() & (tail == want_tail).all()).item())

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
    """Whether the guard bytes read back from a buffer still hold the canary: ``head`` from the
    buffer's first byte, ``tail`` up to its last (a guarded buffer's length is even, so the tail's
    first byte has the parity of its length)."""
    head_b, tail_b = bytes(head), bytes(tail)  # type: ignore[call-overload]
    return bool(head_b == canary_bytes(len(head_b)) and tail_b == canary_bytes(len(tail_b), len(tail_b)))


def _storage_elems(shape: tuple[int, ...], stride: tuple[int, ...], offset: int) -> int:
    if any(s == 0 for s in shape):
        return offset
    return offset + 1 + sum((n - 1) * st for n, st in zip(shape, stride))


def guarded_strided(name: str, shape: tuple[int, ...], stride: tuple[int, ...], offset: int,
                    dtype: torch.dtype, device: torch.device | str | int | None) -> Guarded:
    import torch

    itemsize = torch.empty((), dtype=dtype).element_size()
    elems = _storage_elems(shape, stride, offset)
    nbytes = elems * itemsize
    padded = -(-nbytes // 256) * 256
    buf = _canary_tensor(GUARD_BYTES * 2 + padded, 0, device)  # the padding after the storage keeps it too
    storage = buf[GUARD_BYTES:GUARD_BYTES + padded]
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


def poison_value(dtype: torch.dtype) -> float | bool | int:
    import torch

    if dtype.is_floating_point or dtype.is_complex:
        return float("nan")
    if dtype == torch.bool:
        return True
    return torch.iinfo(dtype).max
