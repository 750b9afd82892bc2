"""Large tensors cross as sealed memory files (gpu_gate.protocol.shared): the stream carries their
header only. The reader takes a descriptor only when it is a memory file sealed against writes,
shrinking and growth, of exactly the size claimed; a sender that keeps a way to change the bytes
after the reader checked them is refused, and no descriptor it sends is left open."""
from __future__ import annotations

import array
import fcntl
import json
import mmap
import os
import socket
import struct
import tempfile
import threading

import pytest

torch = pytest.importorskip("torch")

from gpu_gate.protocol import shared, wire  # noqa: E402
from gpu_gate.protocol.messages import tensors  # noqa: E402

F_SEAL_FUTURE_WRITE = 0x0010  # not in Python's fcntl module


def _open_fds() -> int:
    return len(os.listdir("/proc/self/fd"))


def _announce(sock: socket.socket, sizes: list[int], shared_ix: list[int], fds: list[int], marker: bytes = b"S") -> None:
    head = json.dumps({"op": "truth", "_blobs": sizes, "_shared": shared_ix}).encode()
    sock.sendall(struct.pack("<Q", len(head)) + head)
    sock.sendmsg([marker], [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array("i", fds).tobytes())] if fds else [])


def _memfd(data: bytes, seals: int | None = fcntl.F_SEAL_WRITE | fcntl.F_SEAL_SHRINK | fcntl.F_SEAL_GROW) -> int:
    fd = os.memfd_create("t", os.MFD_ALLOW_SEALING)
    os.write(fd, data)
    if seals is not None:
        fcntl.fcntl(fd, fcntl.F_ADD_SEALS, seals)
    return fd


def test_a_large_tensor_crosses_as_a_sealed_file_and_the_stream_carries_only_its_header() -> None:
    a, b = socket.socketpair()
    big = torch.randn(512, 1024, dtype=torch.float64)  # 4 MiB
    small = torch.arange(7, dtype=torch.int32)
    blobs: wire.Blobs = []
    metas = [tensors.encode_tensor(big, blobs), tensors.encode_tensor(small, blobs)]
    assert isinstance(blobs[0], wire.Shared) and not isinstance(blobs[1], wire.Shared)
    before = dict(wire.STATS)
    fds = _open_fds()
    t = threading.Thread(target=wire.send, args=(b, {"op": "truth"}, blobs))
    t.start()
    header, got = wire.recv(a, budget=big.numel() * 8 + 28)
    t.join()
    assert header == {"op": "truth"}
    out = tensors.decode_tensor(metas[0], got)
    assert torch.equal(out, big) and torch.equal(tensors.decode_tensor(metas[1], got), small)
    out.add_(1)  # the reader's mapping is its own: writing it changes nothing the sender holds
    assert torch.equal(tensors.decode_tensor(metas[0], got), big + 1)
    assert wire.STATS["received_shared_mb"] - before["received_shared_mb"] == pytest.approx(big.numel() * 8 / 1e6)
    assert wire.STATS["received_mb"] - before["received_mb"] == pytest.approx(28 / 1e6)  # only the small one
    del out, got
    assert _open_fds() <= fds  # the sender's file was closed once sent, the reader's once mapped
    a.close()
    b.close()


def test_hundreds_of_shared_blobs_in_one_message() -> None:
    a, b = socket.socketpair()
    blobs: wire.Blobs = []
    metas = [tensors.encode_tensor(torch.full((shared.MIN_BYTES,), i % 251, dtype=torch.uint8), blobs)
             for i in range(300)]  # more descriptors than one control message carries
    t = threading.Thread(target=wire.send, args=(b, {"op": "truth"}, blobs))
    t.start()
    _, got = wire.recv(a)
    t.join()
    assert all(int(tensors.decode_tensor(m, got)[-1]) == i % 251 for i, m in enumerate(metas))
    a.close()
    b.close()


def test_a_sender_that_keeps_a_writable_mapping_is_refused() -> None:
    """The attack: hand over an unsealed memory file, let the reader check the values, then change
    them through a mapping kept open."""
    a, b = socket.socketpair()
    fd = os.memfd_create("t", os.MFD_ALLOW_SEALING)
    os.ftruncate(fd, 1 << 20)
    kept = mmap.mmap(fd, 1 << 20)
    fds = _open_fds()
    _announce(b, [1 << 20], [0], [fd])
    with pytest.raises(wire.BadMessage, match="not sealed against writes"):
        wire.recv(a)
    assert _open_fds() == fds  # the descriptor the reader got is closed
    kept.close()
    os.close(fd)
    a.close()
    b.close()


def test_future_write_seal_with_a_live_mapping_is_refused() -> None:
    """F_SEAL_FUTURE_WRITE stops new writable mappings, not one made before: not enough."""
    a, b = socket.socketpair()
    fd = os.memfd_create("t", os.MFD_ALLOW_SEALING)
    os.ftruncate(fd, 1 << 20)
    kept = mmap.mmap(fd, 1 << 20)
    fcntl.fcntl(fd, fcntl.F_ADD_SEALS, F_SEAL_FUTURE_WRITE | fcntl.F_SEAL_SHRINK | fcntl.F_SEAL_GROW)
    _announce(b, [1 << 20], [0], [fd])
    with pytest.raises(wire.BadMessage, match="not sealed against writes"):
        wire.recv(a)
    kept.close()
    os.close(fd)
    a.close()
    b.close()


def test_a_file_that_may_shrink_under_the_mapping_is_refused() -> None:
    a, b = socket.socketpair()
    fd = _memfd(bytes(1 << 20), seals=fcntl.F_SEAL_WRITE | fcntl.F_SEAL_GROW)
    _announce(b, [1 << 20], [0], [fd])
    with pytest.raises(wire.BadMessage, match="not sealed"):
        wire.recv(a)
    os.close(fd)
    a.close()
    b.close()


def test_a_sealed_file_of_another_size_than_claimed_is_refused() -> None:
    a, b = socket.socketpair()
    fd = _memfd(bytes(1 << 20))
    _announce(b, [2 << 20], [0], [fd])
    with pytest.raises(wire.BadMessage, match="of 1048576 bytes where its header claimed 2097152"):
        wire.recv(a)
    os.close(fd)
    a.close()
    b.close()


@pytest.mark.parametrize("kind", ["pipe", "disk file", "socket"])
def test_a_descriptor_that_is_not_a_memory_file_is_refused(kind: str) -> None:
    a, b = socket.socketpair()
    if kind == "pipe":
        fd, other = os.pipe()
    elif kind == "disk file":
        f = tempfile.TemporaryFile()
        f.write(bytes(1 << 20))
        f.flush()
        fd, other = os.dup(f.fileno()), None
        f.close()
    else:
        s1, s2 = socket.socketpair()
        fd, other = os.dup(s1.fileno()), None
        s1.close()
        s2.close()
    fds = _open_fds()
    _announce(b, [1 << 20], [0], [fd])
    with pytest.raises(wire.BadMessage, match="not a memory file|cannot be sealed"):
        wire.recv(a)
    assert _open_fds() == fds
    os.close(fd)
    if other is not None:
        os.close(other)
    a.close()
    b.close()


@pytest.mark.parametrize("sent", [0, 2])
def test_a_marker_with_other_than_the_announced_descriptors_is_refused_and_nothing_leaks(sent: int) -> None:
    a, b = socket.socketpair()
    made = [_memfd(bytes(1 << 20)) for _ in range(sent)]
    fds = _open_fds()
    _announce(b, [1 << 20], [0], made)
    with pytest.raises(wire.BadMessage, match="descriptors where 1 were announced"):
        wire.recv(a)
    assert _open_fds() == fds
    for fd in made:
        os.close(fd)
    a.close()
    b.close()


@pytest.mark.parametrize("ix", [[1], [-1], [0, 0], [True], "0"])
def test_shared_indices_that_are_not_blobs_of_the_message_are_refused(ix: object) -> None:
    a, b = socket.socketpair()
    head = json.dumps({"op": "truth", "_blobs": [1 << 20], "_shared": ix}).encode()
    b.sendall(struct.pack("<Q", len(head)) + head)
    with pytest.raises(wire.BadMessage, match="shared blobs are not blobs of it"):
        wire.recv(a)
    a.close()
    b.close()


@pytest.mark.parametrize("size", [0, 1, 4096])
def test_a_small_shared_blob_is_refused(size: int) -> None:
    """Every mapping costs the judge one of its process's few (a worker that sent thousands of
    one-byte files would starve the other jobs' allocations): small blobs cross in the stream."""
    a, b = socket.socketpair()
    head = json.dumps({"op": "truth", "_blobs": [size], "_shared": [0]}).encode()
    b.sendall(struct.pack("<Q", len(head)) + head)
    with pytest.raises(wire.BadMessage, match="a shared blob smaller than 1048576 bytes"):
        wire.recv(a)
    a.close()
    b.close()


def test_shared_blobs_count_against_the_readers_budget() -> None:
    a, b = socket.socketpair()
    blobs: wire.Blobs = []
    tensors.encode_tensor(torch.zeros(1 << 20, dtype=torch.uint8), blobs)
    t = threading.Thread(target=wire.send, args=(b, {"op": "truth"}, blobs))
    t.start()
    with pytest.raises(wire.BadMessage, match="more than the 4096 bytes asked for"):
        wire.recv(a, budget=4096)
    t.join()
    a.close()
    b.close()


def test_a_mapping_beyond_the_readers_own_memory_limit_is_its_memory_error_not_the_senders_fault() -> None:
    """The judge bounds its own data (RLIMIT_DATA, which counts private writable mappings): a shared
    blob it cannot map within that is a MemoryError (the job's 'judge-memory' error), as a buffer it
    could not allocate was, never a protocol finding that blames the worker."""
    import subprocess
    import sys

    code = """
import fcntl, os, resource
from gpu_gate.protocol import shared, wire
fd = os.memfd_create("t", os.MFD_ALLOW_SEALING)
os.ftruncate(fd, 1 << 30)
fcntl.fcntl(fd, fcntl.F_ADD_SEALS, fcntl.F_SEAL_WRITE | fcntl.F_SEAL_SHRINK | fcntl.F_SEAL_GROW)
soft, hard = resource.getrlimit(resource.RLIMIT_DATA)
resource.setrlimit(resource.RLIMIT_DATA, (512 << 20, hard))
try:
    shared.mapped(fd, 1 << 30, wire.BadMessage)
except MemoryError as exc:
    print("memory", exc)
"""
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert p.stdout.startswith("memory mapping a shared blob of 1073741824 bytes"), (p.stdout, p.stderr)
