"""The judge's line to a worker: one request, one answer, within the job's deadline.

:class:`SocketChannel` talks to a worker process (the executor made the socket pair and started the
worker in its sandbox). :class:`LocalChannel` serves the same requests from a worker object in the
judge's own process, for callers that run a job in-process (tests, a library's own test suite):
the messages still cross as JSON and bytes, so the judge's side is the same code either way.

Requests and replies are typed records (:mod:`gpu_gate.protocol.messages`). Each request is asked
with a byte budget: the most its reply may carry. A reply is read against what was asked before
any of its blobs' bytes are: one that claims more, answers another request, or does not parse is
a :class:`ProtocolViolation` (the job fails closed, with a ``protocol`` finding), and the buffers
grow only with the bytes that arrive.
"""
from __future__ import annotations

import collections
import dataclasses
import socket
from collections.abc import Sequence
from typing import Protocol

from ..protocol import wire
from ..protocol.shared import Shared
from ..protocol.messages import Bye, Reply, Request, read_reply, read_request


class Handler(Protocol):
    """What answers requests in this process (a worker's server, for ``LocalChannel``): the judge's
    own view of it, so that nothing here imports the worker's side (tests/test_fence.py)."""

    def handle(self, request: Request, blobs: list[bytearray]) -> tuple[Reply, wire.Blobs]: ...


class WorkerLost(Exception):
    """The worker is gone: it died (a crash, a signal, a kernel that killed its process) or closed
    its end."""


class WorkerTimeout(Exception):
    """The worker did not answer before the job's deadline (a hang, or too slow)."""


class ProtocolViolation(Exception):
    """The worker sent something that is not an answer to what the judge asked: a header that is
    not JSON, a reply to another request, a field of the wrong type, a negative shape, a blob out
    of range or larger than the tensor it holds, more bytes than were asked for. Code under review
    runs in that process: this fails the job closed."""


@dataclasses.dataclass(frozen=True)
class Asked:
    """A request sent and not answered yet: its op, and the most bytes its reply may carry."""

    op: str
    budget: int


class Channel(Protocol):
    name: str
    lost: str | None

    def request(self, request: Request, blobs: Sequence[wire.Blob] = ..., budget: int = 0,
                deadline: float | None = None) -> tuple[Reply, list[bytearray]]: ...

    def ask(self, request: Request, blobs: Sequence[wire.Blob] = ..., budget: int = 0) -> None: ...

    def answer(self, deadline: float | None = None) -> tuple[Reply, list[bytearray]]: ...

    def close(self) -> None: ...


def violation(name: str, asked: str, exc: Exception) -> ProtocolViolation:
    return ProtocolViolation(f"the {name} worker's reply to {asked!r} breaks gpu-gate's protocol: {exc}")


class SocketChannel:
    def __init__(self, sock: socket.socket, name: str) -> None:
        self.sock, self.name = sock, name
        self.lost: str | None = None
        self._asked: collections.deque[Asked] = collections.deque()

    def request(self, request: Request, blobs: Sequence[wire.Blob] = (), budget: int = 0,
                deadline: float | None = None) -> tuple[Reply, list[bytearray]]:
        self.ask(request, blobs, budget)
        return self.answer(deadline)

    def ask(self, request: Request, blobs: Sequence[wire.Blob] = (), budget: int = 0) -> None:
        """Send a request without waiting: the worker works while the judge does something else."""
        if self.lost is not None:
            raise WorkerLost(self.lost)
        try:
            wire.send(self.sock, request.to_json(), list(blobs))
        except wire.ChannelClosed as exc:
            self.lost = f"the {self.name} worker exited or died ({exc})"
            raise WorkerLost(self.lost) from exc
        self._asked.append(Asked(request.op, budget))

    def answer(self, deadline: float | None = None) -> tuple[Reply, list[bytearray]]:
        if self.lost is not None:
            raise WorkerLost(self.lost)
        asked = self._asked.popleft()
        try:
            header, sizes, shared = wire.recv_header(self.sock, deadline)
            wire.within(sizes, asked.budget)
            reply = read_reply(asked.op, header, sizes)
            return reply, wire.recv_blobs(self.sock, sizes, deadline, shared)
        except wire.ChannelClosed as exc:
            self.lost = f"the {self.name} worker exited or died ({exc})"
            raise WorkerLost(self.lost) from exc
        except wire.ChannelTimeout as exc:
            self.lost = f"the {self.name} worker did not answer within the job's time budget"
            raise WorkerTimeout(self.lost) from exc
        except wire.BadMessage as exc:
            error = violation(self.name, asked.op, exc)
            self.lost = str(error)
            raise error from exc

    def close(self) -> None:
        if self.lost is None:
            try:
                wire.send(self.sock, Bye().to_json())
            except (wire.ChannelClosed, OSError):
                pass
        self.sock.close()


class LocalChannel:
    """A worker object in this process, reached through the same JSON and bytes a socket would
    carry, read against the same budget."""

    def __init__(self, worker: Handler, name: str) -> None:
        self.worker, self.name = worker, name
        self.lost: str | None = None
        self._pending: collections.deque[tuple[Reply, list[bytearray]] | ProtocolViolation] = collections.deque()

    def request(self, request: Request, blobs: Sequence[wire.Blob] = (), budget: int = 0,
                deadline: float | None = None) -> tuple[Reply, list[bytearray]]:
        self.ask(request, blobs, budget)
        return self.answer(deadline)

    def ask(self, request: Request, blobs: Sequence[wire.Blob] = (), budget: int = 0) -> None:
        header, sizes = wire.frame(request.to_json(), blobs)
        served, out = self.worker.handle(read_request(header, sizes), [_copy(b) for b in blobs])
        header, sizes = wire.frame(served.to_json(), out)
        try:
            wire.within(sizes, budget)
            self._pending.append((read_reply(request.op, header, sizes), [_copy(b) for b in out]))
        except wire.BadMessage as exc:
            self._pending.append(violation(self.name, request.op, exc))

    def answer(self, deadline: float | None = None) -> tuple[Reply, list[bytearray]]:
        got = self._pending.popleft()
        if isinstance(got, ProtocolViolation):
            self.lost = str(got)
            raise got
        return got

    def close(self) -> None:
        return None


def _copy(b: wire.Blob) -> bytearray:
    if isinstance(b, Shared):
        try:
            return b.read()
        finally:
            b.close()
    return bytearray(memoryview(b).cast("B"))
