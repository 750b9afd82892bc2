"""Tensors and values as they cross: a tensor is its dtype, shape and the index of the blob that
holds its values (in logical order); a value is itself, or its type's name only.

Read on receipt, before any blob's bytes are: the dtype is one of torch's, the shape has no
negative dim, the blob index is in range and used once, and the blob's size is exactly the
tensor's (numel x itemsize). A message whose blobs are not each described once is refused too.
"""
from __future__ import annotations

import dataclasses
import functools
import time
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, cast

from .. import shared, wire
from ..shared import Shared
from ..wire import BadMessage
from .fields import MAX_NAME, Fields, mapping, shape, strides, text

if TYPE_CHECKING:
    import torch

DEVICES = ("cpu", "cuda", "meta", "mps", "xpu", "hip")


@functools.cache
def itemsizes() -> dict[str, int]:
    """torch's dtypes by name (``"float32"``), with their sizes in bytes; none without torch."""
    try:
        import torch
    except ImportError:
        return {}
    found = (getattr(torch, n) for n in dir(torch))
    return {str(d).removeprefix("torch."): int(d.itemsize) for d in found if isinstance(d, torch.dtype)}


def numel(dims: Sequence[int]) -> int:
    n = 1
    for d in dims:
        n *= d
    return n


class Ledger:
    """A message's blobs, each to be described exactly once: by a tensor of exactly its size, or
    as a text (a compiler's output) within a bound."""

    def __init__(self, sizes: Sequence[int], what: str) -> None:
        self.sizes, self.what = list(sizes), what
        self.taken: set[int] = set()

    def take(self, index: object, nbytes: int, where: str) -> int:
        index = self._fresh(index, where)
        if self.sizes[index] != nbytes:
            raise BadMessage(f"{where}: blob {index} claims {self.sizes[index]} bytes for a tensor of {nbytes} bytes")
        self.taken.add(index)
        return int(index)

    def take_text(self, index: object, most: int, where: str) -> int:
        """A blob that holds a text of at most ``most`` bytes (a compiler's output: its size is
        the worker's to say, within that bound)."""
        index = self._fresh(index, where)
        if self.sizes[index] > most:
            raise BadMessage(f"{where}: blob {index} claims {self.sizes[index]} bytes (at most {most})")
        self.taken.add(index)
        return int(index)

    def _fresh(self, index: object, where: str) -> int:
        if not isinstance(index, int) or isinstance(index, bool) or not 0 <= index < len(self.sizes):
            raise BadMessage(f"{where}: blob {index!r} is out of range (the {self.what} carries "
                             f"{len(self.sizes)} blobs)")
        if index in self.taken:
            raise BadMessage(f"{where}: blob {index} is described twice")
        return index

    def done(self) -> None:
        if len(self.taken) != len(self.sizes):
            raise BadMessage(f"the {self.what} carries {len(self.sizes)} blobs and describes {len(self.taken)}")


@dataclasses.dataclass(frozen=True)
class TensorMeta:
    """A tensor's values as they cross: ``blob`` holds them in logical order; ``stride`` and
    ``device`` say where the sender held it."""

    dtype: str
    shape: tuple[int, ...]
    blob: int
    stride: tuple[int, ...] = ()
    device: str = "cpu"

    @property
    def nbytes(self) -> int:
        return numel(self.shape) * itemsizes()[self.dtype]

    def to_json(self) -> dict[str, object]:
        return {"dtype": self.dtype, "shape": list(self.shape), "blob": self.blob, "stride": list(self.stride),
                "device": self.device}

    @classmethod
    def from_json(cls, d: object, blobs: Ledger, what: str) -> TensorMeta:
        f = Fields(d, what)
        dtype = f.text("dtype", 64)
        size = itemsizes().get(dtype)
        if size is None:
            raise BadMessage(f"{what}: {dtype!r} is not one of torch's dtypes")
        dims = shape(f.get("shape"), f"{what} shape")
        stride = strides(f.get("stride", []), f"{what} stride")
        device = f.text("device", 16)
        if device not in DEVICES:
            raise BadMessage(f"{what}: unknown device {device!r}")
        blob = blobs.take(f.get("blob"), numel(dims) * size, what)
        return cls(dtype, dims, blob, stride, device)


@dataclasses.dataclass(frozen=True)
class ValueMeta:
    """An output as it crosses. ``kind``: ``tensor`` (its values, in ``tensor``), ``value`` (a
    number, text, flag or None, in ``value``), ``opaque`` (only its type's name: ``type_name``, and
    ``why`` where it was a tensor whose bytes could not be read) or ``held`` (not sent: the same as
    the output the worker holds)."""

    kind: str
    tensor: TensorMeta | None = None
    value: None | bool | int | float | str = None
    type_name: str = ""
    plain: bool = True  # a tensor of type torch.Tensor itself, not a subclass
    why: str = ""

    KINDS = ("tensor", "value", "opaque", "held")

    def to_json(self) -> dict[str, object]:
        d: dict[str, object] = {"kind": self.kind}
        if self.tensor is not None:
            d["tensor"] = self.tensor.to_json()
        if self.kind == "value":
            d["value"] = self.value
        if self.type_name:
            d["type"] = self.type_name
        if not self.plain:
            d["plain"] = False
        if self.why:
            d["why"] = self.why
        return d

    @classmethod
    def from_json(cls, d: object, blobs: Ledger, what: str) -> ValueMeta:
        f = Fields(d, what)
        kind = f.text("kind", 16)
        if kind not in cls.KINDS:
            raise BadMessage(f"{what}: unknown kind of value {kind!r}")
        tensor = TensorMeta.from_json(f.get("tensor"), blobs, f"{what} tensor") if kind == "tensor" else None
        value = f.get("value")
        if kind == "value" and value is not None and not isinstance(value, (bool, int, float, str)):
            raise BadMessage(f"{what}: a value that is not a number, text or flag")
        if isinstance(value, str):
            value = text(value, what)
        scalar = cast("None | bool | int | float | str", value)  # checked above, where it is kept
        return cls(kind, tensor, scalar if kind == "value" else None, f.text("type", MAX_NAME) if "type" in f.d else "",
                   f.flag("plain", True), f.text("why") if "why" in f.d else "")


def tensor_map(value: object, blobs: Ledger, what: str) -> dict[str, TensorMeta]:
    return {text(k, what, MAX_NAME): TensorMeta.from_json(v, blobs, f"{what}[{k!r}]")
            for k, v in mapping(value, what).items()}


def value_map(value: object, blobs: Ledger, what: str) -> dict[str, ValueMeta]:
    return {text(k, what, MAX_NAME): ValueMeta.from_json(v, blobs, f"{what}[{k!r}]")
            for k, v in mapping(value, what).items()}


def tensors_json(metas: dict[str, TensorMeta]) -> dict[str, dict[str, object]]:
    return {k: m.to_json() for k, m in metas.items()}


def values_json(metas: dict[str, ValueMeta]) -> dict[str, dict[str, object]]:
    return {k: m.to_json() for k, m in metas.items()}


# --- making and reading them (torch) ---------------------------------------------------

def plain(t: torch.Tensor) -> torch.Tensor:
    """``t`` as a plain tensor, read without any of its type's own code: no ``__torch_function__``
    override and no Python method of a subclass runs while the bytes are read."""
    import torch

    if type(t) is torch.Tensor:
        return t
    with torch._C.DisableTorchFunctionSubclass():
        return torch.Tensor.as_subclass(t, torch.Tensor)


def flat_bytes(p: torch.Tensor) -> torch.Tensor:
    """A plain tensor's values in logical order, as a 1-D uint8 tensor on its device."""
    import torch

    if not p.numel():
        return torch.empty(0, dtype=torch.uint8, device=p.device)
    flat = torch.empty(p.numel(), dtype=p.dtype, device=p.device)
    flat.copy_(p.reshape(-1))
    return flat.view(torch.uint8)


def encode_tensor(t: torch.Tensor, blobs: wire.Blobs) -> TensorMeta:
    """A tensor's values (in logical order), dtype, shape and where it lived; appends its bytes: a
    copy the worker cannot change by putting its buffer back, in a sealed memory file from
    :data:`~gpu_gate.protocol.shared.MIN_BYTES` on (copied there straight from the device)."""
    import torch

    p = plain(t)
    start = time.monotonic()
    with torch._C.DisableTorchFunctionSubclass():
        dtype, dims = str(p.dtype).removeprefix("torch."), tuple(int(n) for n in p.shape)
        stride, device = tuple(int(s) for s in p.stride()), p.device.type
        data = flat_bytes(p)
        blob: wire.Blob | None = _shared_copy(data) if data.numel() >= shared.MIN_BYTES and shared.available() else None
        if blob is None:
            host = data.cpu() if data.device.type != "cpu" else data.clone()
            blob = memoryview(host.numpy())  # type: ignore[arg-type]  # numpy's stubs give ndarray __buffer__ on 3.12+ only
    wire.add(encode_s=time.monotonic() - start)
    meta = TensorMeta(dtype, dims, len(blobs), stride, device)
    blobs.append(blob)
    return meta


def _shared_copy(data: torch.Tensor) -> Shared | None:
    """``data`` in a sealed memory file; None where one cannot be made (out of descriptors, or of
    memory for the file): the bytes then cross in the stream."""
    import torch

    try:
        out = Shared(int(data.numel()))
    except OSError:
        return None
    try:
        with out.writer() as view:
            target = torch.frombuffer(view, dtype=torch.uint8)
            target.copy_(data)
            del target
        return out.seal()
    except BaseException:
        out.close()
        raise


def decode_tensor(meta: TensorMeta, blobs: Sequence[bytearray], device: torch.device | str = "cpu") -> torch.Tensor:
    """A plain tensor built from the bytes :func:`encode_tensor` sent (``meta`` was read against
    these blobs: its blob exists and is exactly its size)."""
    import torch

    dtype = getattr(torch, meta.dtype, None)
    if not isinstance(dtype, torch.dtype):
        raise BadMessage(f"unknown dtype {meta.dtype!r}")
    raw = blobs[meta.blob]
    if len(raw) != meta.nbytes:
        raise BadMessage(f"{len(raw)} bytes for a {meta.dtype} tensor of shape {list(meta.shape)}")
    if not raw:
        return torch.empty(meta.shape, dtype=dtype, device=device)
    t = torch.frombuffer(raw, dtype=torch.uint8).view(dtype).reshape(meta.shape)
    if str(device) == "cpu":
        return t
    start = time.monotonic()
    try:
        return t.to(device)
    finally:
        wire.add(decode_s=time.monotonic() - start)


def encode_value(v: object, blobs: wire.Blobs) -> ValueMeta:
    """An output: a tensor as data; a number, string, bool or None as itself; anything else by its
    type's name only (the judge reports it, never uses it)."""
    import torch

    if isinstance(v, torch.Tensor):
        type_name, is_plain = f"{type(v).__module__}.{type(v).__qualname__}", type(v) is torch.Tensor
        try:
            return ValueMeta("tensor", encode_tensor(v, blobs), type_name=type_name, plain=is_plain)
        except Exception as exc:  # noqa: BLE001 - a tensor-like object whose bytes cannot be read
            return ValueMeta("opaque", type_name=type_name, plain=is_plain, why=f"{type(exc).__name__}: {exc}")
    if v is None or isinstance(v, (bool, int, float, str)):
        return ValueMeta("value", value=v)
    return ValueMeta("opaque", type_name=f"{type(v).__module__}.{type(v).__qualname__}")


def decode_value(meta: ValueMeta, blobs: Sequence[bytearray], device: torch.device | str = "cpu"
                 ) -> torch.Tensor | None | bool | int | float | str | Opaque:
    if meta.tensor is not None:
        return decode_tensor(meta.tensor, blobs, device)
    if meta.kind == "value":
        return meta.value
    return Opaque(meta.type_name or "?", meta.why)


class Opaque:
    """An output the worker could not send as data: only its type's name crossed."""

    def __init__(self, type_name: str, why: str = "") -> None:
        self.type_name, self.why = type_name, why

    def __repr__(self) -> str:
        return f"<{self.type_name}>"


def encode_dict(values: Mapping[str, object], blobs: wire.Blobs) -> dict[str, ValueMeta]:
    return {k: encode_value(v, blobs) for k, v in values.items()}


def decode_dict(metas: dict[str, ValueMeta], blobs: Sequence[bytearray], device: torch.device | str = "cpu"
                ) -> dict[str, torch.Tensor | None | bool | int | float | str | Opaque]:
    return {k: decode_value(m, blobs, device) for k, m in metas.items()}
