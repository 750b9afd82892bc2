"""The result type the CUDA checks return and the contexts they are given (one definition,
in the harness and the executor; re-exported here for the check modules)."""
from __future__ import annotations

from typing import Any

from ..executor import WrapContext
from ..findings import Finding, Status
from ..harness import Context, Outcome

__all__ = ["Context", "Outcome", "WrapContext", "make_outcome"]


def make_outcome(
    status: Status,
    findings: list[Finding] | None = None,
    *,
    cases: int = 0,
    reason: str | None = None,
    extra: dict[str, Any] | None = None,
) -> Outcome:
    return Outcome(status=status, findings=list(findings or []), cases=cases, reason=reason, extra=dict(extra or {}))
