"""What crosses between the judge and a worker: framed messages over a socket.

A message is a JSON header and a list of raw byte blobs. Tensors cross as their bytes and
geometry, never as objects: no pickle, nothing a worker sends can run code in the judge, and a
tensor the judge rebuilds is a plain ``torch.Tensor`` made from those bytes, whatever type the
candidate returned. Both sides import this module; nothing here decides a verdict.
"""
from __future__ import annotations

import json
import socket
import struct
import threading
import time
from collections.abc import Sequence
from typing import Any

MAX_HEADER = 64 << 20  # a header (JSON) larger than this is not a message of gpu-gate's
MAX_BLOB = 64 << 30
_LEN = struct.Struct("<Q")

Blobs = list[Any]  # bytes, bytearray or memoryview


# What this process moved, for the timing reports only (never a verdict): the blobs' bytes and the
# seconds spent sending them, receiving them once their header had arrived, copying tensors off the
# device to send them, and onto it once received.
STATS = {"sent_mb": 0.0, "send_s": 0.0, "received_mb": 0.0, "receive_s": 0.0, "encode_s": 0.0, "decode_s": 0.0}
_STATS_LOCK = threading.Lock()  # the judge's truth thread adds to them beside its main thread


def _add(**deltas: float) -> None:
    with _STATS_LOCK:
        for k, v in deltas.items():
            STATS[k] += v


def stats() -> dict[str, float]:
    with _STATS_LOCK:
        return {k: round(v, 2) for k, v in STATS.items()}


class ChannelClosed(Exception):
    """The other side closed the channel (it exited, or died)."""


class ChannelTimeout(Exception):
    """No complete message before the deadline."""


class BadMessage(Exception):
    """Something that is not a message of the protocol arrived."""


def send(sock: socket.socket, header: dict[str, Any], blobs: Sequence[Any] = ()) -> None:
    sizes = [memoryview(b).nbytes for b in blobs]
    head = json.dumps({**header, "_blobs": sizes}, separators=(",", ":")).encode()
    start = time.monotonic()
    try:
        sock.sendall(_LEN.pack(len(head)) + head)
        for b in blobs:
            if memoryview(b).nbytes:
                sock.sendall(memoryview(b).cast("B"))
    except (BrokenPipeError, ConnectionResetError) as exc:
        raise ChannelClosed(str(exc)) from exc
    finally:
        _add(send_s=time.monotonic() - start, sent_mb=sum(sizes) / 1e6)


def recv(sock: socket.socket, deadline: float | None = None) -> tuple[dict[str, Any], list[bytearray]]:
    """The next message; ``deadline``: a ``time.monotonic()`` after which it gives up."""
    (n,) = _LEN.unpack(_exact(sock, _LEN.size, deadline))
    if n > MAX_HEADER:
        raise BadMessage(f"a header of {n} bytes")
    try:
        header = json.loads(bytes(_exact(sock, n, deadline)))
    except ValueError as exc:
        raise BadMessage(f"a header that is not JSON: {exc}") from exc
    sizes = header.pop("_blobs", None) if isinstance(header, dict) else None
    if not isinstance(header, dict) or not isinstance(sizes, list) or \
            not all(isinstance(s, int) and 0 <= s <= MAX_BLOB for s in sizes):
        raise BadMessage("a header without its blob sizes")
    start = time.monotonic()
    try:
        return header, [_exact(sock, s, deadline) for s in sizes]
    finally:
        _add(receive_s=time.monotonic() - start, received_mb=sum(sizes) / 1e6)


def _exact(sock: socket.socket, n: int, deadline: float | None) -> bytearray:
    buf = bytearray(n)
    view = memoryview(buf)
    got = 0
    while got < n:
        if deadline is not None:
            left = deadline - time.monotonic()
            if left <= 0:
                raise ChannelTimeout("the deadline passed")
            sock.settimeout(left)
        else:
            sock.settimeout(None)
        try:
            k = sock.recv_into(view[got:], n - got)
        except TimeoutError as exc:
            raise ChannelTimeout("the deadline passed") from exc
        except (ConnectionResetError, OSError) as exc:
            raise ChannelClosed(str(exc)) from exc
        if k == 0:
            raise ChannelClosed("end of stream")
        got += k
    return buf


# --- tensors -----------------------------------------------------------------------

def plain(t: Any) -> Any:
    """``t`` as a plain tensor, read without any of its type's own code: no ``__torch_function__``
    override and no Python method of a subclass runs while the bytes are read."""
    import torch

    if type(t) is torch.Tensor:
        return t
    with torch._C.DisableTorchFunctionSubclass():
        return torch.Tensor.as_subclass(t, torch.Tensor)


def flat_bytes(p: Any) -> Any:
    """A plain tensor's values in logical order, as a 1-D uint8 tensor on its device."""
    import torch

    if not p.numel():
        return torch.empty(0, dtype=torch.uint8, device=p.device)
    flat = torch.empty(p.numel(), dtype=p.dtype, device=p.device)
    flat.copy_(p.reshape(-1))
    return flat.view(torch.uint8)


def encode_tensor(t: Any, blobs: Blobs) -> dict[str, Any]:
    """A tensor's values (in logical order), dtype, shape and where it lived; appends its bytes."""
    import torch

    p = plain(t)
    start = time.monotonic()
    with torch._C.DisableTorchFunctionSubclass():
        meta = {"tensor": True, "dtype": str(p.dtype).removeprefix("torch."), "shape": list(p.shape),
                "stride": list(p.stride()), "device": p.device.type}
        data = flat_bytes(p)
        # a copy, also on the CPU: the bytes must not change when the worker puts the buffer back
        host = data.cpu() if data.device.type != "cpu" else data.clone()
    _add(encode_s=time.monotonic() - start)
    meta["blob"] = len(blobs)
    blobs.append(memoryview(host.numpy()))
    return meta


def decode_tensor(meta: dict[str, Any], blobs: list[bytearray], device: Any = "cpu") -> Any:
    """A plain tensor built from the bytes ``encode_tensor`` sent."""
    import torch

    dtype = getattr(torch, str(meta["dtype"]), None)
    if not isinstance(dtype, torch.dtype):
        raise BadMessage(f"unknown dtype {meta.get('dtype')!r}")
    shape = tuple(int(s) for s in meta["shape"])
    raw = blobs[int(meta["blob"])]
    itemsize = torch.empty((), dtype=dtype).element_size()
    count = 1
    for s in shape:
        count *= s
    if len(raw) != count * itemsize:
        raise BadMessage(f"{len(raw)} bytes for a {dtype} tensor of shape {shape}")
    if not raw:
        return torch.empty(shape, dtype=dtype, device=device)
    t = torch.frombuffer(raw, dtype=torch.uint8).view(dtype).reshape(shape)
    if str(device) == "cpu":
        return t
    start = time.monotonic()
    try:
        return t.to(device)
    finally:
        _add(decode_s=time.monotonic() - start)


def encode_value(v: Any, blobs: Blobs) -> dict[str, Any]:
    """An output: a tensor as data; a number, string, bool or None as itself; anything else by its
    type's name only (the judge reports it, never uses it)."""
    import torch

    if isinstance(v, torch.Tensor):
        meta = {"type": f"{type(v).__module__}.{type(v).__qualname__}", "plain": type(v) is torch.Tensor}
        try:
            meta.update(encode_tensor(v, blobs))
        except Exception as exc:  # noqa: BLE001 - a tensor-like object whose bytes cannot be read
            meta.update({"tensor": False, "unreadable": f"{type(exc).__name__}: {exc}"})
        return meta
    if v is None or isinstance(v, (bool, int, float, str)):
        return {"tensor": False, "value": v}
    return {"tensor": False, "type": f"{type(v).__module__}.{type(v).__qualname__}"}


def decode_value(meta: dict[str, Any], blobs: list[bytearray], device: Any = "cpu") -> Any:
    if meta.get("tensor"):
        return decode_tensor(meta, blobs, device)
    if "value" in meta:
        return meta["value"]
    return Opaque(str(meta.get("type") or "?"), str(meta.get("unreadable") or ""))


class Opaque:
    """An output the worker could not send as data: only its type's name crossed."""

    def __init__(self, type_name: str, why: str = "") -> None:
        self.type_name, self.why = type_name, why

    def __repr__(self) -> str:
        return f"<{self.type_name}>"


def encode_dict(values: dict[str, Any], blobs: Blobs) -> dict[str, Any]:
    return {k: encode_value(v, blobs) for k, v in values.items()}


def decode_dict(metas: Any, blobs: list[bytearray], device: Any = "cpu") -> dict[str, Any]:
    if not isinstance(metas, dict):
        raise BadMessage("expected a mapping of values")
    return {str(k): decode_value(m, blobs, device) for k, m in metas.items()}
