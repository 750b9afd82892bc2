"""From findings to a verdict. The policy decides; nothing else does.

Fail closed: a required check that could not run (status ERROR or NOT_RUN) blocks,
unless the policy says ``not_run: warn``.
"""
from __future__ import annotations

import dataclasses
from typing import Literal

from .checked import gpu_only_not_run, summary
from .exitcodes import ExitCode
from .findings import Finding, JobResult, Severity, Status
from .record import RunRecord

Mode = Literal["fail", "warn", "ignore"]


@dataclasses.dataclass(frozen=True)
class Rules:
    """The parts of the policy the verdict needs (kept small so ``report`` can run from a record)."""

    uncovered: Mode = "fail"
    not_run: Literal["fail", "warn"] = "fail"
    refusals: Mode = "warn"
    unrecognised: Literal["fail", "warn"] = "fail"  # GPU code in no language gpu-gate reads
    submodules: Literal["fail", "warn"] = "fail"  # a submodule moved under the kernel globs
    preexisting: Literal["fail", "warn"] = "warn"  # a failure the base's code has too (differential runs)
    # a GPU-only check not run for want of a GPU: "warn" on a local run on the CPU, never in CI
    # (see gpu_gate.checked)
    gpu_not_run_here: Literal["fail", "warn"] = "fail"
    # a change of the rules that waits for a maintainer's approval: "warn" on a local run on the CPU,
    # where there is no pull request to approve it on, never in CI (see gpu_gate.checked)
    approvals_here: Literal["fail", "warn"] = "fail"


# Findings that block until a maintainer approves the commit on its pull request (gpu_gate.rules)
AWAITS_APPROVAL = frozenset({"rules-weakened", "spec-signature-changed"})
LOCAL_APPROVAL = "a local run, not blocking here (in CI it blocks until a maintainer approves it on the pull request): "


def _approval_here(finding: Finding, rules: Rules) -> bool:
    """A finding that would block until approved, on a local run that lists it without blocking."""
    return (rules.approvals_here == "warn" and finding.kind in AWAITS_APPROVAL
            and finding.severity is Severity.ERROR)


@dataclasses.dataclass(frozen=True)
class Item:
    """One reason in the verdict: a finding or a job that did not produce one."""

    reason: str
    finding: Finding | None = None
    job: JobResult | None = None


@dataclasses.dataclass
class Verdict:
    passed: bool
    blocking: list[Item]
    warnings: list[Item]
    counts: dict[str, int]
    no_kernel_changes: bool
    checked: str = ""  # what ran: "9 of 24 equivalence cases run; float16 not run" (gpu_gate.checked)

    @property
    def exit_code(self) -> ExitCode:
        return ExitCode.PASSED if self.passed else ExitCode.POLICY_BREACHED

    @property
    def headline(self) -> str:
        if self.no_kernel_changes:
            return "gpu-gate: PASSED - no kernel changes"
        c = self.counts
        parts = [f"{c['jobs']} jobs", f"{c['passed']} passed", f"{c['failed']} failed"]
        if c["error"]:
            parts.append(f"{c['error']} could not run")
        if c["not_run"]:
            here = c.get("not_run_here", 0)
            parts.append(f"{c['not_run']} not run" + (f" ({here} GPU-only, not run here)" if here else ""))
        word = "PASSED" if self.passed else "FAILED"
        # the same finding several jobs made at one place (the compile check's and an equivalence job's
        # read of one build) is one problem to the reader: counted once, the jobs' count beside it
        distinct = len(once(self.blocking))
        tail = f"; {distinct} blocking" if self.blocking else ""
        if distinct != len(self.blocking):
            tail += f" ({len(self.blocking)} findings of the jobs)"
        tail += f"; {self.checked}" if self.checked else ""
        return f"gpu-gate: {word} - {', '.join(parts)}{tail}"


def _mode_for(finding: Finding, rules: Rules) -> Mode:
    if _approval_here(finding, rules):
        return "warn"
    if finding.kind == "refused":
        # an input the base's code ran and passed, that the change makes the kernel refuse: a
        # regression, whatever the policy says of refusals in general, unless it ignores them; a
        # refusal the base's code makes too is a refusal like any (not a failure that blocks as debt)
        if finding.details.get("change") == "new" and finding.severity is Severity.ERROR:
            return "ignore" if rules.refusals == "ignore" else "fail"
        return rules.refusals
    if finding.details.get("change") == "pre-existing" and finding.severity is not Severity.NOTE:
        return rules.preexisting
    if finding.kind == "uncovered":
        return rules.uncovered
    if finding.kind == "shape-not-run" and finding.severity is Severity.ERROR:
        return rules.not_run  # a production shape this machine could not run: not verified
    if finding.kind == "unrecognised-kernel":
        return rules.unrecognised
    if finding.kind == "submodule-changed":
        return rules.submodules
    return "fail" if finding.severity is Severity.ERROR else "warn"


def _classify_job(r: JobResult, rules: Rules, blocking: list[Item], warnings: list[Item]) -> None:
    required = r.level == "required"
    if r.status in (Status.ERROR, Status.NOT_RUN):
        verb = "could not run" if r.status is Status.ERROR else "was not run"
        reason = f"{r.check} {verb} for {r.spec or ', '.join(r.kernels)}: {r.reason or 'no reason given'}"
        fail_closed = r.status is Status.ERROR or rules.not_run == "fail"
        if gpu_only_not_run(r) and rules.gpu_not_run_here == "warn":
            reason, fail_closed = f"{reason} (GPU-only: not run here; in CI it blocks)", False
        allowed = r.extra.not_run_allowed_by if r.status is Status.NOT_RUN else None
        if allowed:  # the base's policy says so explicitly (compile's no_values: warn)
            reason, fail_closed = f"{reason} (allowed by {allowed})", False
        item = Item(reason, job=r)
        (blocking if required and fail_closed else warnings).append(item)
    for f in r.findings:
        mode = _mode_for(f, rules)
        if mode == "ignore" or f.severity is Severity.NOTE:
            continue
        item = Item((LOCAL_APPROVAL if _approval_here(f, rules) else "") + f.message, finding=f, job=r)
        (blocking if mode == "fail" and required else warnings).append(item)


def same_place(f: Finding) -> tuple[object, ...] | None:
    """What makes two jobs' findings one: the same check and kind at the same file and line, of the
    same kernel and architecture, with the same change against the base. The compile check and an
    equivalence job that reads the kernels its cases launched both read a kernel's build; where both
    find the same thing there, the user is told once. None for a finding that names no line."""
    if not f.file or not f.line:
        return None
    d = f.details
    return (f.check, f.kind, f.file, f.line, f.severity, str(d.get("kernel", "")), str(d.get("arch", "")),
            str(d.get("change", "")))


def once(items: list[Item]) -> list[Item]:
    """``items`` with each finding that several jobs made at the same place listed once: the first in
    order, with the longest message of them (the one that says the most, e.g. the launched values)."""
    out: list[Item] = []
    at: dict[tuple[object, ...], int] = {}
    for item in items:
        key = same_place(item.finding) if item.finding is not None else None
        if key is None:
            out.append(item)
        elif key in at:
            if len(item.reason) > len(out[at[key]].reason):
                out[at[key]] = item
        else:
            at[key] = len(out)
            out.append(item)
    return out


def decide(record: RunRecord, rules: Rules) -> Verdict:
    blocking: list[Item] = []
    warnings: list[Item] = []
    for f in record.plan_findings:
        mode = _mode_for(f, rules)
        if mode == "fail":
            blocking.append(Item(f.message, finding=f))
        elif mode == "warn" and f.severity is not Severity.NOTE:
            warnings.append(Item((LOCAL_APPROVAL if _approval_here(f, rules) else "") + f.message, finding=f))
    for r in record.results:
        _classify_job(r, rules, blocking, warnings)
    done = {r.job_id for r in record.results}
    for job_id in record.planned_jobs:
        if job_id not in done:  # a shard that crashed, was cancelled or never ran
            blocking.append(Item(f"job {job_id} produced no result (its shard failed, was cancelled or never ran)"))
    counts = {
        "jobs": len(record.results),
        "passed": sum(r.status is Status.PASSED for r in record.results),
        "failed": sum(r.status is Status.FAILED for r in record.results),
        "error": sum(r.status is Status.ERROR for r in record.results),
        "not_run": sum(r.status is Status.NOT_RUN for r in record.results),
        "not_run_here": sum(gpu_only_not_run(r) for r in record.results) if rules.gpu_not_run_here == "warn" else 0,
        "missing": len([j for j in record.planned_jobs if j not in done]),
        "findings": sum(len(r.findings) for r in record.results) + len(record.plan_findings),
    }
    no_changes = not record.kernels and not record.plan_findings and not record.results
    # blocking items stay one per job (each job's status rests on them); warnings are listed once
    return Verdict(passed=not blocking, blocking=blocking, warnings=once(warnings), counts=counts,
                   no_kernel_changes=no_changes, checked=summary(record.results))
