"""Large blobs crossing by shared memory: a sealed memfd handed over the socket, not its bytes.

A tensor of :data:`MIN_BYTES` or more is written once, by its sender, into an anonymous memory
file (``memfd_create``) that is then sealed against every change (``F_SEAL_WRITE``, ``F_SEAL_SHRINK``,
``F_SEAL_GROW``, ``F_SEAL_SEAL``); the file's descriptor crosses the Unix socket (``SCM_RIGHTS``) and
the reader maps it. The stream then carries only the header: no copy through the kernel's socket
buffers on either side, no receive buffer grown and zeroed, and the pages are the sender's, counted
against the sender's memory limit.

Read on receipt, as the stream's sizes are: a descriptor is accepted only if it is a sealed memory
file of exactly the size its header claimed. A sender that kept a writable mapping cannot seal it
(``F_SEAL_WRITE`` fails while one exists), so once accepted the bytes cannot change under the
reader, and the file cannot shrink under its mapping (no ``SIGBUS``). Anything else (a pipe, a disk
file, an unsealed or only ``F_SEAL_FUTURE_WRITE``-sealed memfd, a wrong size, too many or too few
descriptors) is a :class:`~gpu_gate.protocol.wire.BadMessage`, and every descriptor received is
closed. The reader maps copy-on-write: a tensor made on the mapping may be written in place without
touching the sender's file.
"""
from __future__ import annotations

import array
import errno
import fcntl
import mmap
import os
import socket
import stat

MIN_BYTES = 1 << 20  # smaller blobs cross in the stream: a memfd's set-up costs more than their copy
MAX_FDS = 128  # descriptors in one control message (the kernel's limit is 253)

# F_SEAL_FUTURE_WRITE is not what is asked: a mapping made before it may still write
_SEALS = fcntl.F_SEAL_SEAL | fcntl.F_SEAL_SHRINK | fcntl.F_SEAL_GROW | fcntl.F_SEAL_WRITE
_NEEDED = fcntl.F_SEAL_SHRINK | fcntl.F_SEAL_GROW | fcntl.F_SEAL_WRITE


def available() -> bool:
    return hasattr(os, "memfd_create") and hasattr(socket, "SCM_RIGHTS")


class Shared:
    """A blob held in a sealed memory file: :meth:`writer` gives a writable mapping to fill, then
    :meth:`seal` closes it and seals the file. ``fd`` is the sender's until the message is sent."""

    def __init__(self, nbytes: int) -> None:
        self.nbytes = nbytes
        self.fd: int | None = os.memfd_create("gpu-gate-blob", os.MFD_CLOEXEC | os.MFD_ALLOW_SEALING)
        try:
            os.ftruncate(self.fd, nbytes)
            self.map: mmap.mmap | None = mmap.mmap(self.fd, nbytes)
        except BaseException:
            self.close()
            raise

    def writer(self) -> memoryview:
        if self.map is None:
            raise ValueError("sealed")
        return memoryview(self.map)

    def seal(self) -> Shared:
        """Unmap the writable view (every view made by :meth:`writer` must be released first) and
        seal the file against every change."""
        if self.map is not None:
            self.map.close()
            self.map = None
        assert self.fd is not None
        fcntl.fcntl(self.fd, fcntl.F_ADD_SEALS, _SEALS)
        return self

    def read(self) -> bytearray:
        """The bytes, copied (a channel within one process)."""
        assert self.fd is not None
        with mmap.mmap(self.fd, self.nbytes, access=mmap.ACCESS_READ) as m:
            return bytearray(m)

    def close(self) -> None:
        if self.map is not None:
            try:
                self.map.close()
            except BufferError:  # a view of it is still alive; the mapping goes with it
                pass
            self.map = None
        if self.fd is not None:
            os.close(self.fd)
            self.fd = None

    def __del__(self) -> None:
        try:
            self.close()
        except OSError:
            pass


def send_fds(sock: socket.socket, fds: list[int]) -> None:
    """Hand ``fds`` over, :data:`MAX_FDS` to a control message, each message one marker byte."""
    for i in range(0, len(fds), MAX_FDS):
        chunk = array.array("i", fds[i:i + MAX_FDS])
        sock.sendmsg([b"S"], [(socket.SOL_SOCKET, socket.SCM_RIGHTS, chunk.tobytes())])


def recv_fds(sock: socket.socket, n: int, bad: type[Exception]) -> list[int]:
    """The ``n`` (at most :data:`MAX_FDS`) descriptors of the next marker. A marker that carries
    more, fewer or other control data is ``bad``; every descriptor received is closed on any
    failure."""
    got: list[int] = []
    try:
        data, anc, flags, _ = sock.recvmsg(1, socket.CMSG_SPACE(n * 4), socket.MSG_CMSG_CLOEXEC)
        got = _fds(anc)
        if not data:
            raise ConnectionResetError("end of stream")
        if data != b"S" or flags & socket.MSG_CTRUNC or len(got) != n:
            raise bad(f"a shared-memory marker with {len(got)} descriptors where {n} were announced")
        return got
    except BaseException:
        for fd in got:
            os.close(fd)
        raise


def _fds(anc: list[tuple[int, int, bytes]]) -> list[int]:
    out: list[int] = []
    for level, kind, data in anc:
        if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
            a = array.array("i")
            a.frombytes(data[:len(data) - len(data) % a.itemsize])
            out += list(a)
    return out


def mapped(fd: int, nbytes: int, bad: type[Exception]) -> mmap.mmap:
    """A private (copy-on-write) mapping of a received descriptor, after the checks above; the
    descriptor is closed either way."""
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise bad("a shared-memory descriptor that is not a memory file")
        try:
            seals = fcntl.fcntl(fd, fcntl.F_GET_SEALS)
        except OSError as exc:
            raise bad(f"a shared-memory descriptor that cannot be sealed ({exc.strerror})") from exc
        if seals & _NEEDED != _NEEDED:
            raise bad("a shared-memory blob whose file is not sealed against writes, shrinking and growth")
        if st.st_size != nbytes or nbytes <= 0:
            raise bad(f"a shared-memory blob of {st.st_size} bytes where its header claimed {nbytes}")
        try:
            return mmap.mmap(fd, nbytes, access=mmap.ACCESS_COPY)
        except OSError as exc:
            if exc.errno == errno.ENOMEM:  # the reader's own limit (the judge's RLIMIT_DATA): its memory, as a buffer's
                raise MemoryError(f"mapping a shared blob of {nbytes} bytes: {exc.strerror}") from exc
            raise bad(f"a shared-memory blob that cannot be mapped ({exc.strerror})") from exc
    finally:
        os.close(fd)
