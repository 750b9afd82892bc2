"""Reading a worker's reply, once the channel has read it against what was asked: what an error
reply means for the job, the reply as the kind its request gets, the tensors rebuilt from its
bytes (what cannot be is the worker's protocol violation), and the exceptions that end a job."""
from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import TypeVar

from ..protocol import wire
from ..protocol.messages import ErrorReply, Reply, StatsReply
from .channel import Channel, violation

R = TypeVar("R")


class ContextLost(Exception):
    """The candidate's CUDA context, or its worker, is gone: the rest of this job cannot run."""


class WorkerDied(ContextLost):
    """The candidate's worker process is gone (a crash, a signal, an exit): the executor knows how."""


class SpecBroken(Exception):
    """The spec itself (its reference) is wrong; not the kernel's fault."""


class ReferenceOutOfMemory(SpecBroken):
    """The reference ran out of GPU memory on a case: other work shares the GPU, or the case is too
    large for what is free. A check that can run the case smaller (the contention cases) does."""


def check(reply: Reply, what: str) -> None:
    """Raise what a worker's error reply means for the job."""
    if not isinstance(reply, ErrorReply):
        return
    if reply.error == "fatal":
        raise ContextLost(reply.message)
    if reply.error == "reference":
        raise SpecBroken(reply.message)
    if reply.error == "oom":
        raise ReferenceOutOfMemory(reply.message)
    raise ContextLost(f"the {what} worker failed: {reply.message or reply.error}")


def expect(reply: Reply, kind: type[R], channel: Channel) -> R:
    """``reply`` as the kind of reply its request gets (an error reply was handled before)."""
    if not isinstance(reply, kind):
        raise violation(channel.name, getattr(reply, "op", "?"), wire.BadMessage(f"a {type(reply).__name__}"))
    return reply


@contextlib.contextmanager
def reading(channel: Channel, asked: str) -> Iterator[None]:
    """Tensors rebuilt from a reply's bytes: what cannot be is the worker's protocol violation."""
    try:
        yield
    except wire.BadMessage as exc:
        error = violation(channel.name, asked, exc)
        channel.lost = str(error)
        raise error from exc


def stats_of(reply: Reply, channel: Channel) -> dict[str, object]:
    if isinstance(reply, ErrorReply):
        return {}
    got = expect(reply, StatsReply, channel)
    out: dict[str, object] = {k: v for k, v in got.wire.items()}
    for key, value in (("alive_s", got.alive_s), ("context_s", got.context_s)):  # its age, and its CUDA context's
        if value is not None:
            out[key] = round(value, 2)
    return out
