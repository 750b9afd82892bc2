"""Findings and job results: the data that checks return and reporters format.

A check never prints. It returns findings; the policy turns them into a verdict.
Everything here is plain data and JSON-serialisable, because results travel
between the judge's process, matrix shards and the ``report`` command.
"""
from __future__ import annotations

import dataclasses
import enum
from typing import Any

from .job_extra import JobExtra


class Severity(str, enum.Enum):
    """How bad a finding is *for the kernel*. The policy decides if it blocks."""

    ERROR = "error"  # the kernel is wrong or could not be checked
    WARNING = "warning"  # suspicious, or a loud refusal of an input
    NOTE = "note"  # information (resource usage, what was covered)


class Status(str, enum.Enum):
    """Outcome of one job (one spec x one check)."""

    PASSED = "passed"
    FAILED = "failed"  # the check ran and found errors
    ERROR = "error"  # the check could not run properly (crash, timeout, import error)
    NOT_RUN = "not_run"  # deliberately not run, with a reason (no GPU, bf16 in the interpreter)


@dataclasses.dataclass(frozen=True)
class Finding:
    check: str
    kind: str  # short machine code: "mismatch", "nan", "uncovered", "timeout", "race", ...
    message: str
    severity: Severity = Severity.ERROR
    spec: str | None = None  # "gate/rmsnorm_gate.py::rmsnorm_gate"
    case: str | None = None  # case id, e.g. "c0017"
    file: str | None = None  # repo-relative path of the offending source
    line: int | None = None
    repro: str | None = None  # one shell command that re-runs exactly this
    details: dict[str, Any] = dataclasses.field(default_factory=dict)

    def to_json(self) -> dict[str, object]:
        d = dataclasses.asdict(self)
        d["severity"] = self.severity.value
        return d

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> Finding:
        d = dict(d)
        d["severity"] = Severity(d.get("severity", "error"))
        d.setdefault("details", {})
        return cls(**d)

    @property
    def location(self) -> str | None:
        if not self.file:
            return None
        return f"{self.file}:{self.line}" if self.line else self.file


@dataclasses.dataclass
class JobResult:
    job_id: str
    check: str
    status: Status
    level: str = "required"  # "required" | "advisory", from the policy
    spec: str | None = None
    kernels: tuple[str, ...] = ()
    findings: list[Finding] = dataclasses.field(default_factory=list)
    duration_s: float = 0.0
    cases: int = 0  # how many cases (inputs) the check exercised
    reason: str | None = None  # why NOT_RUN / ERROR
    log_tail: str | None = None  # last lines of the subprocess's stderr
    cached_from: str | None = None  # commit whose result was reused
    extra: JobExtra = dataclasses.field(default_factory=JobExtra)  # check-specific (seed, coverage, resources)

    def to_json(self) -> dict[str, object]:
        return {
            "job_id": self.job_id,
            "check": self.check,
            "status": self.status.value,
            "level": self.level,
            "spec": self.spec,
            "kernels": list(self.kernels),
            "findings": [f.to_json() for f in self.findings],
            "duration_s": round(self.duration_s, 3),
            "cases": self.cases,
            "reason": self.reason,
            "log_tail": self.log_tail,
            "cached_from": self.cached_from,
            "extra": self.extra.to_json(),
        }

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> JobResult:
        return cls(
            job_id=d["job_id"],
            check=d["check"],
            status=Status(d["status"]),
            level=d.get("level", "required"),
            spec=d.get("spec"),
            kernels=tuple(d.get("kernels", ())),
            findings=[Finding.from_json(f) for f in d.get("findings", [])],
            duration_s=float(d.get("duration_s", 0.0)),
            cases=int(d.get("cases", 0)),
            reason=d.get("reason"),
            log_tail=d.get("log_tail"),
            cached_from=d.get("cached_from"),
            extra=JobExtra.from_json(d.get("extra")),
        )

    @property
    def errors(self) -> list[Finding]:
        return [f for f in self.findings if f.severity is Severity.ERROR]
