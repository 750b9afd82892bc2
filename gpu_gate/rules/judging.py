"""In the job: a spec that exists at the base is judged by the base's source, run against the head's
kernels. When that source no longer runs against the head (it does not import, or the candidate's call
no longer fits the kernel's signature), the head's spec judges instead, and the job says so."""
from __future__ import annotations

from ..findings import Finding, Severity
from ..protocol.jobs import Job, carried

def signature_broke(job: Job, findings: list[Finding]) -> str | None:
    """Why the base's spec could not run against the head, or None when it ran."""
    if carried(job) is None:
        return None
    for f in findings:
        if f.kind in ("spec-import-error", "spec-not-found"):
            return f.message.split(" (")[0]
        if f.kind == "refused-canonical" and ": TypeError" in f.message and f.details.get("change") != "pre-existing":
            return f.message
    return None


def fallback_finding(job: Job, why: str) -> Finding:
    """Judged by the head's spec: reported always; blocking when the head's reference differs from the
    base's, since then the change wrote the truth it is judged by (unless the base says warn)."""
    spec = carried(job) or {}
    rewrote = bool(spec.get("reference_changed"))
    blocks = rewrote and spec.get("rule_changes", "fail") == "fail"
    sid = job.spec.id if job.spec else None
    if rewrote:
        message = (f"the base's spec no longer runs against the head ({_short(why)}): judged by the head's spec, "
                   f"whose reference this change rewrote, so the change is judged by rules it wrote; review it")
    else:
        message = (f"the spec's call signature changed: judged by the head's spec, review it (the base's spec "
                   f"no longer runs against the head: {_short(why)})")
    return Finding(check=job.check, kind="rules-weakened" if rewrote else "spec-signature-changed", message=message,
                   severity=Severity.ERROR if blocks else Severity.WARNING, spec=sid,
                   file=job.spec.file if job.spec else None, details={"why": why, "reference_changed": rewrote})


def _short(text: str) -> str:
    line = text.strip().splitlines()[0] if text.strip() else ""
    return line if len(line) <= 200 else line[:197] + "..."
