"""The messages between the judge and its workers, as typed records.

A worker's answer is data the judge validates on receipt: a field of the wrong type or out of its
range is a :class:`~gpu_gate.protocol.wire.BadMessage`, which the judge reports as a protocol
finding that fails the job closed, never as an internal error.

Every request and its reply (:mod:`.kinds` lists them): the requests every worker answers and the
error reply (:mod:`.control`), a call of the code under review (:mod:`.call`), the reference's
answers (:mod:`.reference`), the compile check's (:mod:`.compile`); tensors and values as they cross (:mod:`.tensors`); reading a field
(:mod:`.fields`).
"""
from __future__ import annotations

import dataclasses

from ..wire import BadMessage
from .fields import MAX_TEXT, text


@dataclasses.dataclass(frozen=True)
class SpecImportFacts:
    """Why the spec did not import in a worker: the kind (``spec-import-error``, ``spec-not-found``, or
    ``truth-unavailable``: it needs the repository's code, which must be the base's, and the base's
    tree is not there), the spec's file and line, the message, the traceback, and the module that was
    not found (where the import failed for a missing module: torch or Triton means an extra to install)."""

    kind: str
    file: str
    line: int | None
    message: str
    traceback: str = ""
    missing_module: str = ""

    KINDS = ("spec-import-error", "spec-not-found", "truth-unavailable")

    def to_json(self) -> dict[str, object]:
        return dataclasses.asdict(self)

    @classmethod
    def from_json(cls, d: object) -> SpecImportFacts:
        if not isinstance(d, dict):
            raise BadMessage("spec-import: expected a mapping of facts")
        kind = text(d.get("kind"), "spec-import kind", 40)
        if kind not in cls.KINDS:
            raise BadMessage(f"spec-import: unknown kind {kind!r}")
        line = d.get("line")
        if line is not None and (not isinstance(line, int) or isinstance(line, bool) or line < 0):
            raise BadMessage("spec-import: a line that is not a line number")
        return cls(kind, text(d.get("file"), "spec-import file", 4096), line, text(d.get("message"), "spec-import message"),
                   text(d.get("traceback", ""), "spec-import traceback"),
                   text(d.get("missing_module", ""), "spec-import missing module", 200))


# --- judge <-> worker requests and replies (see .kinds) --------------------------------------

from .call import Call, CallDone, CallFailed, Geometry, GuardedInput, Watch  # noqa: E402
from .compile import (CompileFacts, CompileReply, CompileRequest, DiagnosticFacts, NvccFacts, ResourceFacts,  # noqa: E402
                      TritonBuildFacts, TritonKernelFacts, ptx_text, put_text)
from .control import (Ahead, AheadDone, AheadDoneReply, AheadReply, Bye, Describe, DescribeReply,  # noqa: E402
                      ErrorReply, Finish, FinishReply, Load, LoadReply, Release, ReleaseReply, SpecDescription,
                      SpecImportReply, Stats, StatsReply)
from .kinds import REPLIES, REQUESTS, Reply, Request, read_reply, read_request  # noqa: E402
from .reference import (BaselineFp32, BaselineFp32Reply, Flops, FlopsReply, GradRecipe, HeadReference,  # noqa: E402
                        HeadReferenceReply, Truth, TruthReply, Upstream, UpstreamReply)
from .tensors import Ledger, Opaque, TensorMeta, ValueMeta  # noqa: E402
from .timing import Time, Timed  # noqa: E402

__all__ = ["MAX_TEXT", "REPLIES", "REQUESTS", "Ahead", "AheadDone", "AheadDoneReply", "AheadReply", "BaselineFp32",
           "BaselineFp32Reply", "Bye", "Call", "CallDone", "CallFailed", "CompileFacts", "CompileReply",
           "CompileRequest", "Describe", "DescribeReply", "DiagnosticFacts", "ErrorReply", "Finish", "FinishReply",
           "Flops", "FlopsReply", "Geometry", "GradRecipe", "GuardedInput", "HeadReference", "HeadReferenceReply", "Ledger", "Load",
           "LoadReply", "NvccFacts", "Opaque", "Release", "ReleaseReply", "Reply", "Request", "ResourceFacts",
           "SpecDescription", "SpecImportFacts", "SpecImportReply", "Stats", "StatsReply", "TensorMeta",
           "Time", "Timed", "TritonBuildFacts", "TritonKernelFacts", "Truth", "TruthReply", "Upstream", "UpstreamReply", "ValueMeta",
           "Watch", "ptx_text", "put_text", "read_reply", "read_request", "text"]
