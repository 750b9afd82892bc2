"""Framing: a message's sizes are claims until its bytes arrive. The reader refuses blobs that claim
more than its budget before reading any, and its buffers grow with the bytes that arrive."""
from __future__ import annotations

import json
import socket
import struct
import threading
import tracemalloc

import pytest

from gpu_gate.protocol import wire


def _claim(sock: socket.socket, header: dict[str, object], sizes: list[int], then: bytes = b"") -> None:
    head = json.dumps({**header, "_blobs": sizes}).encode()
    sock.sendall(struct.pack("<Q", len(head)) + head + then)


def test_a_claim_that_never_arrives_costs_nothing() -> None:
    a, b = socket.socketpair()
    sent = bytes(100_000)

    def worker() -> None:
        _claim(b, {"op": "call"}, [1 << 30])
        b.sendall(sent)
        b.close()

    t = threading.Thread(target=worker)
    tracemalloc.start()
    try:
        t.start()
        with pytest.raises(wire.ChannelClosed):
            wire.recv(a, budget=None)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
        t.join()
        a.close()
    assert peak < 16 << 20, peak  # a 1 GiB claim, 100 kB sent: the buffer followed the bytes


def test_blobs_that_claim_more_than_the_budget_are_refused_before_a_byte_is_read() -> None:
    a, b = socket.socketpair()
    _claim(b, {"op": "call"}, [10, 1 << 20], then=b"0123456789")
    with pytest.raises(wire.BadMessage, match="blobs that claim 1048586 bytes, more than the 4096 bytes asked for"):
        wire.recv(a, budget=4096)
    a.setblocking(False)
    assert a.recv(100) == b"0123456789"  # nothing of the blobs was read
    a.close()
    b.close()


def test_a_message_within_its_budget_is_read_whole() -> None:
    a, b = socket.socketpair()
    blob = bytes(range(256)) * 40_000  # 10 MB: more than one step of the growing buffer
    threading.Thread(target=lambda: wire.send(b, {"op": "truth"}, [blob, b"xy"]), daemon=True).start()
    header, blobs = wire.recv(a, budget=len(blob) + 2)
    assert header == {"op": "truth"} and bytes(blobs[0]) == blob and bytes(blobs[1]) == b"xy"
    a.close()
    b.close()


@pytest.mark.parametrize("sizes", [[-1], [1.5], [True], "16", [wire.MAX_BLOB + 1]])
def test_blob_sizes_that_are_not_sizes_are_refused(sizes: object) -> None:
    a, b = socket.socketpair()
    head = json.dumps({"op": "call", "_blobs": sizes}).encode()
    b.sendall(struct.pack("<Q", len(head)) + head)
    with pytest.raises(wire.BadMessage, match="without its blob sizes"):
        wire.recv(a)
    a.close()
    b.close()


def test_a_header_longer_than_any_message_is_refused_unread() -> None:
    a, b = socket.socketpair()
    b.sendall(struct.pack("<Q", wire.MAX_HEADER + 1))
    with pytest.raises(wire.BadMessage, match="a header of"):
        wire.recv(a)
    a.close()
    b.close()
