"""Reporters: they format a merged RunRecord and its Verdict; they never run checks.

This module holds what every reporter needs to read the verdict the same way:
which job or finding blocks the merge, how a job is named, and how untrusted
text (a kernel's output can hold NUL bytes and ANSI colour codes) is cleaned.
It must stay import-light: ``report`` runs without torch.
"""
from __future__ import annotations

import re
from collections.abc import Iterable

from ..judge.checks import CHECKS
from ..findings import Finding, JobResult, Status
from ..verdict import Item, Verdict

# CSI sequences (colours, cursor moves) and OSC sequences (titles, hyperlinks) as terminals emit them.
_ANSI = re.compile(r"\x1b\[[0-?]*[ -/]*[@-~]|\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)|\x1b[@-Z\\-_]")
# Characters XML 1.0 forbids, plus surrogates and the two non-characters U+FFFE/U+FFFF.
_XML_ILLEGAL = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\ud800-\udfff\ufffe\uffff]")


def clean_text(text: str) -> str:
    """Drop ANSI escape sequences and show other control characters as ``\\xNN``."""
    text = _ANSI.sub("", text).replace("\r\n", "\n")
    return _XML_ILLEGAL.sub(lambda m: f"\\x{ord(m.group()):02x}", text)


# torch.testing.assert_close opens with one of these; the line after it says what differs.
_GENERIC_OPENERS = ("Tensor-likes are not close!", "Tensor-likes are not equal!", "Scalars are not close!",
                    "Scalars are not equal!")


def first_line(text: str, limit: int = 200) -> str:
    """The line that best summarises ``text``: its first line, past assert_close's generic opener."""
    lines = [ln.strip() for ln in clean_text(text).split("\n") if ln.strip()]
    if len(lines) > 1 and lines[0] in _GENERIC_OPENERS:
        lines = lines[1:]
    line = lines[0] if lines else ""
    return line if len(line) <= limit else line[: limit - 1] + "…"


def job_target(result: JobResult) -> str:
    """What a job checked: its spec id, else its kernel files."""
    return result.spec or ", ".join(result.kernels) or result.job_id


def short_sha(sha: str) -> str:
    return sha[:12]


def check_order(checks: Iterable[str]) -> list[str]:
    """Registry order first (compile, equivalence, ...), unknown checks after, by name."""
    wanted = set(checks)
    known = [c for c in CHECKS if c in wanted]
    return known + sorted(wanted - set(known))


def blocking_jobs(verdict: Verdict) -> set[int]:
    """ids of the JobResults that have at least one blocking item."""
    return {id(i.job) for i in verdict.blocking if i.job is not None}


def blocking_findings(verdict: Verdict) -> set[int]:
    return {id(i.finding) for i in verdict.blocking if i.finding is not None}


def warning_findings(verdict: Verdict) -> set[int]:
    return {id(i.finding) for i in verdict.warnings if i.finding is not None}


def missing_items(verdict: Verdict) -> list[Item]:
    """Blocking items with neither job nor finding: planned jobs whose shard produced nothing."""
    return [i for i in verdict.blocking if i.job is None and i.finding is None]


def not_run_jobs(results: Iterable[JobResult]) -> list[JobResult]:
    return [r for r in results if r.status in (Status.NOT_RUN, Status.ERROR)]


def finding_title(finding: Finding) -> str:
    where = finding.spec or finding.file or ""
    return f"{finding.check} {finding.kind}" + (f" in {where}" if where else "")
