"""The messages between the judge and its workers, as typed records.

A worker's answer is data the judge validates on receipt: a field of the wrong type or out of its
range is a :class:`~gpu_gate.protocol.wire.BadMessage`, which the judge reports as a protocol
finding that fails the job closed, never as an internal error.
"""
from __future__ import annotations

import dataclasses
from typing import Any

from .wire import BadMessage

MAX_TEXT = 64 << 10  # characters of any one text a worker sends (a message, a traceback)


def text(value: Any, what: str, limit: int = MAX_TEXT) -> str:
    if not isinstance(value, str):
        raise BadMessage(f"{what}: expected text, got {type(value).__name__}")
    return value[:limit]


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

    def to_json(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_json(cls, d: Any) -> SpecImportFacts:
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
