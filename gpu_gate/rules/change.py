"""One change to the rules between the base and the head, with its direction, and the finding it becomes."""
from __future__ import annotations

import dataclasses
from typing import Literal

from ..findings import Finding, Severity

Direction = Literal["weakened", "tightened", "changed", "new"]
KINDS: dict[Direction, str] = {"weakened": "rules-weakened", "tightened": "rules-tightened",
                               "changed": "rules-changed", "new": "new-reference"}


@dataclasses.dataclass(frozen=True)
class RuleChange:
    direction: Direction
    what: str  # "checks.equivalence.level: required -> advisory"
    file: str | None = None
    line: int | None = None
    spec: str | None = None
    approvable: bool = False  # a maintainer's approval of the head commit lets it through (gpu_gate.rules.approved)

    def finding(self, mode: Literal["fail", "warn"]) -> Finding:
        """A weakening blocks unless the base policy says `rule_changes: warn`; nothing else ever blocks."""
        blocking = self.direction == "weakened" and mode == "fail"
        details: dict[str, object] = {"direction": self.direction, "rule_changes": mode}
        if self.approvable:
            details[APPROVABLE] = True
        return Finding(check="rules", kind=KINDS[self.direction], message=self._message(mode),
                       severity=Severity.ERROR if blocking else Severity.WARNING, spec=self.spec, file=self.file,
                       line=self.line, details=details)

    def _message(self, mode: str) -> str:
        where = f"{self.file}:{self.line}: " if self.file and self.line else f"{self.file}: " if self.file else ""
        if self.direction == "weakened":
            tail = (blocks_until(self.approvable) if mode == "fail"
                    else "allowed by the base policy's `rule_changes: warn`")
            return f"{where}rules weakened by this change: {self.what} ({tail})"
        if self.direction == "tightened":
            return f"{where}rules tightened by this change: {self.what}"
        if self.direction == "new":
            return f"{where}{self.what}"
        return f"{where}rules changed by this change: {self.what}"


APPROVABLE = "approvable"  # Finding.details key: a maintainer's approval of the head commit lets it through
APPROVE_COMMAND = "/gpu-gate approve-rules"


def blocks_until(approvable: bool) -> str:
    if approvable:
        return (f"blocks until a maintainer approves this commit with a comment `{APPROVE_COMMAND} <head sha>` on "
                f"the pull request, or the base policy says `rule_changes: warn`")
    return "blocks until a maintainer changes it on the base branch, or the base policy says `rule_changes: warn`"


def ordinal(order: tuple[str, ...], old: object, new: object) -> Direction:
    """``order`` runs from the loosest to the strictest value."""
    if old in order and new in order:
        return "weakened" if order.index(str(new)) < order.index(str(old)) else "tightened"
    return "changed"
