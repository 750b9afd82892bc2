"""In the job: a spec that exists at the base is judged by the base's source, run against the head's
kernels. When that source no longer runs against the head (it does not import, or the candidate's call
no longer fits the kernel's signature), the head's spec may have adapted only the plumbing, the call to
the kernel (:mod:`.plumbing`, read at plan time): then the base's spec judges with the head's call.
Otherwise the head's spec judges, and that blocks as ``spec-signature-changed`` until a maintainer
approves the commit (or the base policy says ``rule_changes: warn``)."""
from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from ..findings import Finding, Severity
from ..protocol.jobs import Job, carried, with_head_call, without_base
from .change import APPROVABLE, blocks_until

if TYPE_CHECKING:
    from ..judge.job import Outcome

KIND = "spec-signature-changed"


def signature_broke(job: Job, findings: list[Finding]) -> str | None:
    """Why the base's spec could not run against the head, or None when it ran."""
    if carried(job) is None:
        return None
    for f in findings:
        if f.kind in ("spec-import-error", "spec-not-found"):
            return f"the base's spec does not import at the head ({_short(f.message.split(' (')[0])})"
        if f.kind == "refused-canonical" and ": TypeError" in f.message and f.details.get("change") != "pre-existing":
            return f"the base's spec's call does not fit the head's kernel ({_short(f.message)})"
    return None


def fall_back(job: Job, why: str, run: Callable[[Job], Outcome]) -> Outcome:
    """Run the job again as the head's spec allows (``run``: the check, returning its outcome), with a
    finding that says how it was judged."""
    spec = carried(job) or {}
    listed = spec.get("plumbing")
    reasons = [str(r) for r in listed] if isinstance(listed, list) else [
        "the head's spec was not compared with the base's"]
    if not reasons:
        hybrid = with_head_call(job)
        outcome = run(hybrid)
        broke = signature_broke(hybrid, outcome.findings)
        if broke is None:
            outcome.findings.append(_finding(job, why, [], base_judged=True))
            return outcome
        if spec.get("reference_changed"):
            reasons = [f"its reference differs from the base's, whose spec does not run with the head's call either "
                       f"({broke})"]
    outcome = run(without_base(job))
    outcome.findings.append(_finding(job, why, reasons, base_judged=False))
    return outcome


def _finding(job: Job, why: str, reasons: list[str], *, base_judged: bool) -> Finding:
    spec = carried(job) or {}
    sid = job.spec.id if job.spec else None
    name = job.spec.name if job.spec else "?"
    file = job.spec.file if job.spec else None
    if not reasons:
        how = ("judged by the base's spec with the head's call to the kernel" if base_judged else
               "judged by the head's spec, which differs from the base's only in that call")
        return Finding(check=job.check, kind=KIND, severity=Severity.WARNING, spec=sid, file=file,
                       message=f"the spec's call changed with the kernel's signature: {how}; review it ({why})",
                       details={"why": why, "plumbing": True})
    blocks = spec.get("rule_changes", "fail") == "fail"
    tail = blocks_until(True) if blocks else "allowed by the base policy's `rule_changes: warn`"
    return Finding(check=job.check, kind=KIND, severity=Severity.ERROR if blocks else Severity.WARNING, spec=sid,
                   file=file, details={"why": why, "plumbing": False, "reasons": reasons, APPROVABLE: True},
                   message=f"spec {name}: the head's spec changes more than the call to the kernel "
                           f"({'; '.join(reasons)}), and {why}: judged by the head's spec, so the change is judged "
                           f"by rules it wrote; it {tail}")


def _short(text: str) -> str:
    line = text.strip().splitlines()[0] if text.strip() else ""
    return line if len(line) <= 200 else line[:197] + "..."
