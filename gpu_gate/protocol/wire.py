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

Large tensors do not cross in the stream at all: their sender writes them once into a sealed memory
file and hands over its descriptor (:mod:`.shared`); the reader maps it after checking that it is
sealed and exactly the size claimed.
"""
from __future__ import annotations

import json
import os
import socket
import struct
import threading
import time
from collections.abc import Mapping, Sequence
from typing import Union

from .shared import MAX_FDS, MIN_BYTES as SHARED_MIN, Shared, mapped, recv_fds, send_fds

MAX_HEADER = 64 << 20  # a header (JSON) larger than this is not a message of gpu-gate's
MAX_BLOB = 64 << 30
MAX_BLOBS = 1 << 16  # blobs in one message
STEP = 8 << 20  # a buffer grows by at most this much before the bytes for it have arrived
_ZEROS = memoryview(bytes(STEP))
_LEN = struct.Struct("<Q")

Blob = Union[bytes, bytearray, memoryview, Shared]
Blobs = list[Blob]

# plain JSON data, as json.loads makes it (a header as it arrives)
Json = Union[None, bool, int, float, str, list["Json"], dict[str, "Json"]]


# What this process moved, for the timing reports only (never a verdict): the blobs' bytes and the
# seconds spent sending them, receiving them once their header had arrived, copying tensors off the
# device to send them, and onto it once received.
# ``*_shared_mb``: the bytes of blobs that crossed as sealed memory files (:mod:`.shared`), not in
# the stream, so not in ``sent_mb``/``received_mb``.
STATS = {"sent_mb": 0.0, "send_s": 0.0, "received_mb": 0.0, "receive_s": 0.0, "encode_s": 0.0, "decode_s": 0.0,
         "sent_shared_mb": 0.0, "received_shared_mb": 0.0}
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


def size(b: Blob) -> int:
    return b.nbytes if isinstance(b, Shared) else memoryview(b).nbytes


def send(sock: socket.socket, header: Mapping[str, object], blobs: Sequence[Blob] = ()) -> None:
    """Send a message. A :class:`~.shared.Shared` blob crosses as its sealed file's descriptor,
    handed over right after the header (its index in ``_shared``), and is closed on this side once
    sent; the other blobs follow in the stream."""
    sizes = [size(b) for b in blobs]
    shared = [i for i, b in enumerate(blobs) if isinstance(b, Shared)]
    extra = {"_shared": shared} if shared else {}
    head = json.dumps({**header, "_blobs": sizes, **extra}, separators=(",", ":")).encode()
    start = time.monotonic()
    try:
        sock.sendall(_LEN.pack(len(head)) + head)
        if shared:
            send_fds(sock, [_fd(blobs[i]) for i in shared])
        for b in blobs:
            if not isinstance(b, Shared) and memoryview(b).nbytes:
                sock.sendall(memoryview(b).cast("B"))
    except (BrokenPipeError, ConnectionResetError) as exc:
        raise ChannelClosed(str(exc)) from exc
    finally:
        for i in shared:
            blobs[i].close()  # type: ignore[union-attr]
        on_stream = sum(s for i, s in enumerate(sizes) if i not in shared)
        add(send_s=time.monotonic() - start, sent_mb=on_stream / 1e6,
            sent_shared_mb=sum(sizes[i] for i in shared) / 1e6)


def _fd(b: Blob) -> int:
    assert isinstance(b, Shared) and b.fd is not None and b.map is None, "a shared blob is sealed before it is sent"
    return b.fd


def frame(header: Mapping[str, object], blobs: Sequence[Blob] = ()) -> tuple[dict[str, Json], list[int]]:
    """``header`` and its blob sizes as a reader would see them (a channel within one process)."""
    return json.loads(json.dumps(header)), [size(b) for b in blobs]


def recv(sock: socket.socket, deadline: float | None = None, budget: int | None = None
         ) -> tuple[dict[str, Json], list[bytearray]]:
    """The next message; ``deadline``: a ``time.monotonic()`` after which it gives up; ``budget``:
    the most blob bytes the message may carry (see :func:`within`)."""
    header, sizes, shared = recv_header(sock, deadline)
    within(sizes, budget)
    return header, recv_blobs(sock, sizes, deadline, shared)


def recv_header(sock: socket.socket, deadline: float | None = None
                ) -> tuple[dict[str, Json], list[int], frozenset[int]]:
    """The next message's header, the sizes its blobs claim (none of them read yet) and which of
    them cross as shared memory."""
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
    shared = header.pop("_shared", [])
    if not isinstance(shared, list) or not all(isinstance(i, int) and not isinstance(i, bool) and 0 <= i < len(sizes)
                                               for i in shared) or len(set(shared)) != len(shared):
        raise BadMessage("a header whose shared blobs are not blobs of it")
    if any(sizes[i] < SHARED_MIN for i in shared):  # each mapping costs the reader one of its process's few
        raise BadMessage(f"a shared blob smaller than {SHARED_MIN} bytes (those cross in the stream)")
    return header, sizes, frozenset(shared)


def within(sizes: Sequence[int], budget: int | None) -> None:
    """Refuse blobs that claim more bytes in all than ``budget`` (None: no budget of the reader's)."""
    claimed = sum(sizes)
    if budget is not None and claimed > budget:
        raise BadMessage(f"blobs that claim {claimed} bytes, more than the {budget} bytes asked for")


def recv_blobs(sock: socket.socket, sizes: Sequence[int], deadline: float | None = None,
               shared: frozenset[int] = frozenset()) -> list[bytearray]:
    """The blobs: the shared ones mapped from the descriptors that follow the header (each checked,
    :func:`.shared.mapped`), then the others read from the stream. A mapping is copy-on-write, so
    it is used as a ``bytearray`` is."""
    start = time.monotonic()
    got: dict[int, bytearray] = {}
    try:
        if shared:
            _settimeout(sock, deadline)
            order = sorted(shared)
            for first in range(0, len(order), MAX_FDS):  # one marker's descriptors mapped (and closed) at a time
                chunk = order[first:first + MAX_FDS]
                try:
                    fds = recv_fds(sock, len(chunk), BadMessage)
                except TimeoutError as exc:
                    raise ChannelTimeout("the deadline passed") from exc
                except (ConnectionResetError, OSError) as exc:
                    raise ChannelClosed(str(exc)) from exc
                for k, (i, fd) in enumerate(zip(chunk, fds)):
                    try:
                        got[i] = mapped(fd, sizes[i], BadMessage)  # type: ignore[assignment]  # writable, as a bytearray
                    except BaseException:
                        for rest in fds[k + 1:]:
                            os.close(rest)
                        raise
        return [got[i] if i in shared else read(sock, s, deadline) for i, s in enumerate(sizes)]
    finally:
        add(receive_s=time.monotonic() - start,
            received_mb=sum(s for i, s in enumerate(sizes) if i not in shared) / 1e6,
            received_shared_mb=sum(sizes[i] for i in shared) / 1e6)


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
