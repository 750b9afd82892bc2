"""The compile check's findings from the compiled code, against the base's build (a pull request).

The findings read from the PTX (a lock or flag released without a barrier, a scatter without
atomics, an offset computed in 32 bits: :mod:`.compiled_races`, :mod:`.compiled_offsets`) say
what a kernel file's code does, not what a change did. In a pull request the compile check's
``base`` worker compiles the base's tree too (for the architecture whose PTX is read), and each of the head's findings is compared with the base's for the
same kernel: as many or fewer of a kind there, it is the repository's debt (pre-existing, which
the policy's ``preexisting`` rule decides); more, they are the change's (new), and a new 32-bit
offset blocks; what the base has and the head no longer does is reported fixed. A kernel whose
compiled code the base's build did not read (new in the file, or not built there) has no base,
and the absolute rules apply; a base whose build could not be read at all leaves the head's
findings as they are. A note says which.
"""
from __future__ import annotations

import dataclasses
from collections import Counter
from typing import TypeVar

from ..compiled import ptx_offsets
from ...findings import Finding, JobResult, Severity, Status
from ...protocol.jobs import Job
from .outcome import Outcome

LINT_KINDS = frozenset({ptx_offsets.KIND, "lock-release-without-barrier", "global-scatter-without-atomics"})
# A base build that these say nothing was read from (a file that does not import or build)
UNBUILT = frozenset({"import-error", "missing-file", "tool-missing", "timeout"})
R = TypeVar("R", JobResult, Outcome)  # a job's result, or a check's outcome before it is one
PRE_EXISTING = "pre-existing (the base's build of this kernel has it too): "
NEW = "new in this change: "


def against_base(job: Job, head: R, base: JobResult | Outcome | None, commit: str) -> R:
    short = commit[:12]
    if not any(f.kind in LINT_KINDS for f in [*head.findings, *(base.findings if base else [])]):
        return head  # nothing read from either build: nothing to compare
    unbuilt = next((f for f in base.findings if f.kind in UNBUILT or (f.kind == "compile-error"
                                                                     and "kernel" not in f.details)), None) if base else None
    if base is None or base.status in (Status.ERROR, Status.NOT_RUN) or unbuilt is not None:
        why = ("it produced no result" if base is None else unbuilt.message.splitlines()[0][:300] if unbuilt
               else (base.reason or base.status.value))
        return _with(head, head.findings, _note(f"not compared with the base's build ({short}): {why}; the "
                                                f"findings read from the compiled code are judged as they are"))
    # kernels whose compiled code was not read at the base: new there (a new kernel in an existing
    # file has no base, and the absolute rules apply), or there but not built
    read_at_base = {k for k in base.extra.linted or () if isinstance(k, str)}
    out, fixed, unread = compare(head.findings, base.findings, read_at_base)
    new, old = tally(out)
    note = _note(f"compared with the base's build ({short}) of the same kernels: {new} new, {old} pre-existing and "
                 f"{len(fixed)} fixed finding(s) read from the compiled code"
                 + (f"; not compared, the base's build has no such kernel or could not build it: "
                    f"{', '.join(unread)}" if unread else ""))
    return _with(head, out + fixed, note)


def compare(head: list[Finding], base: list[Finding], read_at_base: set[str], read_at_head: set[str] | None = None
            ) -> tuple[list[Finding], list[Finding], list[str]]:
    """The head's findings, those read from the compiled code marked against the base's (kernel by
    kernel, kind by kind: as many or fewer at the base, pre-existing; more, new, and a new 32-bit
    offset is an error), the base's that the head no longer has (fixed, notes; only of the kernels
    in ``read_at_head`` where given: one the head's build did not read is not fixed), and the
    kernels of the head's findings whose code the base's build did not read (left as they are)."""
    unread = {k for f in head if f.kind in LINT_KINDS
              if isinstance(k := f.details.get("kernel"), str) and k not in read_at_base}
    at_base = Counter(_key(f) for f in base if f.kind in LINT_KINDS)
    at_head = Counter(_key(f) for f in head if f.kind in LINT_KINDS)
    out: list[Finding] = []
    for f in head:
        if f.kind not in LINT_KINDS or _key(f)[1] in unread:
            out.append(f)
        elif at_head[_key(f)] <= at_base[_key(f)]:
            out.append(_marked(dataclasses.replace(f, message=PRE_EXISTING + f.message), "pre-existing"))
        else:
            severity = Severity.ERROR if f.kind == ptx_offsets.KIND else f.severity
            out.append(_marked(dataclasses.replace(f, severity=severity, message=NEW + f.message), "new"))
    fixed = []
    for key, n in sorted(at_base.items(), key=lambda kv: (kv[0][0], kv[0][1] or "")):
        if n > at_head[key] and (read_at_head is None or key[1] in read_at_head):
            f = next(b for b in base if _key(b) == key)
            fixed.append(_marked(dataclasses.replace(f, severity=Severity.NOTE, message=(
                f"fixed by this change: the base's build of kernel {key[1]} has {n} of these, the head's "
                f"{at_head[key]}: {f.message}")), "fixed"))
    return out, fixed, sorted(unread)


def tally(findings: list[Finding]) -> tuple[int, int]:
    """How many of ``findings`` :func:`compare` marked new, and how many pre-existing."""
    changes = [f.details.get("change") for f in findings]
    return changes.count("new"), changes.count("pre-existing")


def _key(f: Finding) -> tuple[str, str | None]:
    kernel = f.details.get("kernel")
    return f.kind, kernel if isinstance(kernel, str) else None


def _marked(f: Finding, change: str) -> Finding:
    return dataclasses.replace(f, details={**f.details, "change": change})


def _note(message: str) -> Finding:
    return Finding("compile", "differential", message, Severity.NOTE)


def _with(head: R, findings: list[Finding], note: Finding) -> R:
    failing = any(f.severity is Severity.ERROR for f in findings)
    status = Status.FAILED if failing and head.status is Status.PASSED else head.status
    return dataclasses.replace(head, findings=[*findings, note], status=status)
