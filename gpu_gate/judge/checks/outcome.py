"""What the checks return and what they are given: the result type (one definition, in the judge's job module,
re-exported here for the check modules), and the context of a check that wraps a worker in
another tool (compute-sanitizer), which the executor builds."""
from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import TYPE_CHECKING

from ...findings import Finding, Status
from ...job_extra import JobExtra
from ..job import Context, Outcome

if TYPE_CHECKING:
    from ...proc import ProcResult

__all__ = ["BaseRun", "Context", "Outcome", "WrapContext", "make_outcome"]


@dataclasses.dataclass(frozen=True)
class WrapContext:
    """What a wrapping check (compute-sanitizer) needs to know in the executor."""

    repo_root: Path
    has_gpu: bool
    sanitizer_path: str | None
    timeout_s: float
    env: dict[str, str]
    # The tool's front end runs outside the worker's sandbox (bwrap, or none); False: inside it
    # (unshare), where its report lies in the worker's own directory.
    tool_outside: bool = True


@dataclasses.dataclass(frozen=True)
class BaseRun:
    """The base's worker under the same tool, in a differential run: its directory, how the tool
    ended, and where the base's tree lies on disk (to read the lines its reports point at)."""

    workdir: Path
    proc: ProcResult
    root: Path


def make_outcome(
    status: Status,
    findings: list[Finding] | None = None,
    *,
    cases: int = 0,
    reason: str | None = None,
    extra: JobExtra | None = None,
) -> Outcome:
    return Outcome(status=status, findings=list(findings or []), cases=cases, reason=reason,
                   extra=extra.copy() if extra is not None else JobExtra())
