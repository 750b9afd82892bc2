"""Every kind of message between the judge and a worker: each request by its ``op``, and the reply
each one gets. A reply names the request it answers (its ``op``); one to another request, or one
that does not parse, is a :class:`~gpu_gate.protocol.wire.BadMessage`."""
from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Union

from ..wire import BadMessage
from .call import Call, CallDone, CallFailed, read_call_reply
from .compile import CompileReply, CompileRequest
from .control import (Ahead, AheadDone, AheadDoneReply, AheadReply, Bye, Describe, DescribeReply, ErrorReply, Finish,
                      FinishReply, Load, LoadReply, Release, ReleaseReply, SpecImportReply, Stats, StatsReply)
from .fields import Fields
from .reference import (BaselineFp32, BaselineFp32Reply, Flops, FlopsReply, HeadReference, HeadReferenceReply, Truth,
                        TruthReply, Upstream, UpstreamReply)
from .tensors import Ledger
from .timing import Time, Timed

Request = Union[Load, Describe, Finish, Ahead, AheadDone, Stats, Release, Bye, Call, Upstream, Truth, BaselineFp32,
                HeadReference, Flops, CompileRequest, Time]
Reply = Union[LoadReply, SpecImportReply, DescribeReply, FinishReply, AheadReply, AheadDoneReply, StatsReply,
              ReleaseReply, CallDone, CallFailed, UpstreamReply, TruthReply, BaselineFp32Reply, HeadReferenceReply,
              FlopsReply, CompileReply, Timed, ErrorReply]

REQUESTS: dict[str, type[Request]] = {cls.op: cls for cls in (Load, Describe, Finish, Ahead, AheadDone, Stats, Release, Bye,
                                                     Call, Upstream, Truth, BaselineFp32, HeadReference,
                                                     Flops, CompileRequest, Time)}

# the reply each request gets (an error aside); bye gets none
REPLIES: dict[str, Callable[[object, Ledger], Reply]] = {
    "load": LoadReply.from_json, "describe": DescribeReply.from_json, "finish": FinishReply.from_json,
    "ahead": AheadReply.from_json, "ahead_done": AheadDoneReply.from_json, "stats": StatsReply.from_json,
    "release": ReleaseReply.from_json, "call": read_call_reply, "upstream": UpstreamReply.from_json,
    "truth": TruthReply.from_json, "baseline_fp32": BaselineFp32Reply.from_json,
    "head_reference": HeadReferenceReply.from_json, "flops": FlopsReply.from_json, "compile": CompileReply.from_json, "time": Timed.from_json}


def read_request(header: object, sizes: Sequence[int]) -> Request:
    """The request a header and its blobs' sizes make (a worker reads the judge's)."""
    op = Fields(header, "request").get("op")
    kind = REQUESTS.get(op) if isinstance(op, str) else None
    if kind is None:
        raise BadMessage(f"an unknown request {op!r}")
    blobs = Ledger(sizes, f"{op} request")
    request: Request = kind.from_json(header, blobs)
    blobs.done()
    return request


def read_reply(asked: str, header: object, sizes: Sequence[int]) -> Reply:
    """The reply to the request ``asked`` (its op) that a header and its blobs' sizes make: read
    before any blob's bytes are."""
    f = Fields(header, f"reply to {asked}")
    op = f.get("op")
    if op != asked:
        raise BadMessage(f"a reply to {op!r} where {asked!r} was asked")
    blobs = Ledger(sizes, f"reply to {asked}")
    error = f.get("error")
    if error == "spec-import" and asked == "load":
        reply: Reply = SpecImportReply.from_json(header, blobs)
    elif error is not None:
        reply = ErrorReply.from_json(header, blobs)
    elif asked not in REPLIES:
        raise BadMessage(f"a reply to {asked!r}, which gets none")
    else:
        reply = REPLIES[asked](header, blobs)
    blobs.done()
    return reply
