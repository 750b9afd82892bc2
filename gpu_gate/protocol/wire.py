"""What crosses between the judge and a worker: framed messages over a socket.

A message is a JSON header and a list of raw byte blobs. Tensors cross as their bytes and
geometry, never as objects: no pickle, nothing a worker sends can run code in the judge, and a
tensor the judge rebuilds is a plain ``torch.Tensor`` made from those bytes, whatever type the
candidate returned (see :mod:`.messages.tensors`). Both sides import this module; nothing here
decides a verdict.

A message's sizes are claims until its bytes arrive. The reader takes a byte budget (what it asked
for) and refuses a header whose blobs claim more before reading any of them; every buffer grows
with the bytes that actually arrive, never to the size a header announces (a 40-byte header once
announced a 3 GiB blob, and the judge allocated and zeroed it before a byte came).
"""
from __future__ import annotations

import json
import socket
import struct
import threading
import time
from collections.abc import Mapping, Sequence
from typing import Union

MAX_HEADER = 64 << 20  # a header (JSON) larger than this is not a message of gpu-gate's
MAX_BLOB = 64 << 30
MAX_BLOBS = 1 << 16  # blobs in one message
STEP = 8 << 20  # a buffer grows by at most this much before the bytes for it have arrived
_ZEROS = memoryview(bytes(STEP))
_LEN = struct.Struct("<Q")

Blob = Union[bytes, bytearray, memoryview]
Blobs = list[Blob]

# plain JSON data, as json.loads makes it (a header as it arrives)
Json = Union[None, bool, int, float, str, list["Json"], dict[str, "Json"]]


# What this process moved, for the timing reports only (never a verdict): the blobs' bytes and the
# seconds spent sending them, receiving them once their header had arrived, copying tensors off the
# device to send them, and onto it once received.
STATS = {"sent_mb": 0.0, "send_s": 0.0, "received_mb": 0.0, "receive_s": 0.0, "encode_s": 0.0, "decode_s": 0.0}
_STATS_LOCK = threading.Lock()  # the judge's truth thread adds to them beside its main thread


def add(**deltas: float) -> None:
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
    """Something that is not a message of the protocol arrived: it does not parse, or it claims
    more than was asked for, or its fields are of the wrong type, size or shape."""


def send(sock: socket.socket, header: Mapping[str, object], blobs: Sequence[Blob] = ()) -> None:
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
        add(send_s=time.monotonic() - start, sent_mb=sum(sizes) / 1e6)


def frame(header: Mapping[str, object], blobs: Sequence[Blob] = ()) -> tuple[dict[str, Json], list[int]]:
    """``header`` and its blob sizes as a reader would see them (a channel within one process)."""
    return json.loads(json.dumps(header)), [memoryview(b).nbytes for b in blobs]


def recv(sock: socket.socket, deadline: float | None = None, budget: int | None = None
         ) -> tuple[dict[str, Json], list[bytearray]]:
    """The next message; ``deadline``: a ``time.monotonic()`` after which it gives up; ``budget``:
    the most blob bytes the message may carry (see :func:`within`)."""
    header, sizes = recv_header(sock, deadline)
    within(sizes, budget)
    return header, recv_blobs(sock, sizes, deadline)


def recv_header(sock: socket.socket, deadline: float | None = None) -> tuple[dict[str, Json], list[int]]:
    """The next message's header, and the sizes its blobs claim (none of them read yet)."""
    (n,) = _LEN.unpack(read(sock, _LEN.size, deadline))
    if n > MAX_HEADER:
        raise BadMessage(f"a header of {n} bytes (at most {MAX_HEADER})")
    try:
        header = json.loads(bytes(read(sock, n, deadline)))
    except ValueError as exc:
        raise BadMessage(f"a header that is not JSON: {exc}") from exc
    sizes = header.pop("_blobs", None) if isinstance(header, dict) else None
    if not isinstance(header, dict) or not isinstance(sizes, list) or len(sizes) > MAX_BLOBS or \
            not all(isinstance(s, int) and not isinstance(s, bool) and 0 <= s <= MAX_BLOB for s in sizes):
        raise BadMessage("a header without its blob sizes")
    return header, sizes


def within(sizes: Sequence[int], budget: int | None) -> None:
    """Refuse blobs that claim more bytes in all than ``budget`` (None: no budget of the reader's)."""
    claimed = sum(sizes)
    if budget is not None and claimed > budget:
        raise BadMessage(f"blobs that claim {claimed} bytes, more than the {budget} bytes asked for")


def recv_blobs(sock: socket.socket, sizes: Sequence[int], deadline: float | None = None) -> list[bytearray]:
    start = time.monotonic()
    try:
        return [read(sock, s, deadline) for s in sizes]
    finally:
        add(receive_s=time.monotonic() - start, received_mb=sum(sizes) / 1e6)


def read(sock: socket.socket, n: int, deadline: float | None) -> bytearray:
    """``n`` bytes from ``sock``, in a buffer that grows with the bytes that arrive (by ``STEP`` at
    most ahead of them): a claim that is never sent costs nothing."""
    buf = bytearray()
    got = 0
    while got < n:
        if got == len(buf):
            buf += _ZEROS[:min(STEP, n - got, max(got, 1 << 16))]
        _settimeout(sock, deadline)
        try:
            with memoryview(buf) as whole, whole[got:] as view:
                k = sock.recv_into(view, len(buf) - got)
        except TimeoutError as exc:
            raise ChannelTimeout("the deadline passed") from exc
        except (ConnectionResetError, OSError) as exc:
            raise ChannelClosed(str(exc)) from exc
        if k == 0:
            raise ChannelClosed("end of stream")
        got += k
    return buf


def _settimeout(sock: socket.socket, deadline: float | None) -> None:
    if deadline is None or deadline == float("inf"):  # a judge with no time budget waits as long as it takes
        sock.settimeout(None)
        return
    left = deadline - time.monotonic()
    if left <= 0:
        raise ChannelTimeout("the deadline passed")
    sock.settimeout(left)
