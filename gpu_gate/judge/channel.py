"""The judge's line to a worker: one request, one answer, within the job's deadline.

:class:`SocketChannel` talks to a worker process (the executor made the socket pair and started the
worker in its sandbox). :class:`LocalChannel` serves the same requests from a worker object in the
judge's own process, for callers that run a job in-process (tests, a library's own test suite):
the messages still cross as bytes, so the judge's side is the same code either way.
"""
from __future__ import annotations

import json
import socket
from collections.abc import Sequence
from typing import Any, Protocol

from ..protocol import wire


class WorkerLost(Exception):
    """The worker is gone: it died (a crash, a signal, a kernel that killed its process) or closed
    its end."""


class WorkerTimeout(Exception):
    """The worker did not answer before the job's deadline (a hang, or too slow)."""


class Channel(Protocol):
    name: str

    def request(self, header: dict[str, Any], blobs: Sequence[Any] = ..., deadline: float | None = None
                ) -> tuple[dict[str, Any], list[bytearray]]: ...

    def ask(self, header: dict[str, Any], blobs: Sequence[Any] = ...) -> None: ...

    def answer(self, deadline: float | None = None) -> tuple[dict[str, Any], list[bytearray]]: ...

    def close(self) -> None: ...


class SocketChannel:
    def __init__(self, sock: socket.socket, name: str) -> None:
        self.sock, self.name = sock, name
        self.lost: str | None = None

    def request(self, header: dict[str, Any], blobs: Sequence[Any] = (), deadline: float | None = None
                ) -> tuple[dict[str, Any], list[bytearray]]:
        self.ask(header, blobs)
        return self.answer(deadline)

    def ask(self, header: dict[str, Any], blobs: Sequence[Any] = ()) -> None:
        """Send a request without waiting: the worker works while the judge does something else."""
        if self.lost is not None:
            raise WorkerLost(self.lost)
        try:
            wire.send(self.sock, header, list(blobs))
        except wire.ChannelClosed as exc:
            self.lost = f"the {self.name} worker exited or died ({exc})"
            raise WorkerLost(self.lost) from exc

    def answer(self, deadline: float | None = None) -> tuple[dict[str, Any], list[bytearray]]:
        if self.lost is not None:
            raise WorkerLost(self.lost)
        try:
            return wire.recv(self.sock, deadline)
        except wire.ChannelClosed as exc:
            self.lost = f"the {self.name} worker exited or died ({exc})"
            raise WorkerLost(self.lost) from exc
        except wire.ChannelTimeout as exc:
            self.lost = f"the {self.name} worker did not answer within the job's time budget"
            raise WorkerTimeout(self.lost) from exc
        except wire.BadMessage as exc:
            self.lost = f"the {self.name} worker sent something that is not an answer ({exc})"
            raise WorkerLost(self.lost) from exc

    def close(self) -> None:
        if self.lost is None:
            try:
                wire.send(self.sock, {"op": "bye"})
            except (wire.ChannelClosed, OSError):
                pass
        self.sock.close()


class LocalChannel:
    """A worker object in this process, reached through the same bytes a socket would carry."""

    def __init__(self, worker: Any, name: str) -> None:
        self.worker, self.name = worker, name
        self._pending: tuple[dict[str, Any], list[bytearray]] | None = None

    def request(self, header: dict[str, Any], blobs: Sequence[Any] = (), deadline: float | None = None
                ) -> tuple[dict[str, Any], list[bytearray]]:
        header = json.loads(json.dumps(header))
        reply, out = self.worker.handle(header, [bytearray(memoryview(b).cast("B")) for b in blobs])
        return json.loads(json.dumps(reply)), [bytearray(memoryview(b).cast("B")) for b in out]

    def ask(self, header: dict[str, Any], blobs: Sequence[Any] = ()) -> None:
        self._pending = self.request(header, blobs)

    def answer(self, deadline: float | None = None) -> tuple[dict[str, Any], list[bytearray]]:
        assert self._pending is not None, "answer() without ask()"
        reply, self._pending = self._pending, None
        return reply

    def close(self) -> None:
        return None
