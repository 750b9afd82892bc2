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
    return cut(lines[0] if lines else "", limit)


def cut(line: str, limit: int) -> str:
    """``line`` in at most ``limit`` characters: cut between words, never inside one, and marked with
    an ellipsis. Only a single word longer than half the room (a path, a token) is cut inside."""
    if len(line) <= limit:
        return line
    room = line[: limit - 1]
    if not line[limit - 1].isspace():  # the cut falls inside a word: back to the space before it
        at = max(room.rfind(c) for c in " \n\t")
        room = room[:at] if at >= limit // 2 else room
    return room.rstrip(" \n\t,;:(") + "…"


def reason_key(result: JobResult) -> str:
    """The job's reason with its own check's name taken out ("each check"), so that one cause that
    several checks share ("no GPU on this machine: memcheck needs a CUDA device", the same for
    racecheck) is one reason, said once."""
    return re.sub(rf"\b{re.escape(result.check)}\b", "each check", result.reason or "no reason given")


def group_not_run(results: Iterable[JobResult], blocking: set[int]) -> dict[tuple[str, str, bool], list[JobResult]]:
    """Jobs that did not run, by (verb, reason, whether they block), in report order; the reason is
    the job's own when its group holds one check, else the shared one (:func:`reason_key`)."""
    groups: dict[tuple[str, str, bool], list[JobResult]] = {}
    for r in not_run_jobs(results):
        verb = "not run" if r.status is Status.NOT_RUN else "could not run"
        groups.setdefault((verb, reason_key(r), id(r) in blocking), []).append(r)
    return {(verb, key if len({r.check for r in jobs}) > 1 else (jobs[0].reason or "no reason given"), blocks): jobs
            for (verb, key, blocks), jobs in groups.items()}


def targets_phrase(jobs: Iterable[JobResult], limit: int = 6) -> str:
    """"memcheck, racecheck for a.py::x, b.py::y (4 jobs)": the checks and targets, each once."""
    jobs = list(jobs)
    checks = check_order({r.check for r in jobs})
    targets = list(dict.fromkeys(job_target(r) for r in jobs))
    shown = ", ".join(targets[:limit])
    more = f" and {len(targets) - limit} more" if len(targets) > limit else ""
    count = f" ({len(jobs)} jobs)" if len(jobs) > 1 else ""
    return f"{', '.join(checks)} for {shown}{more}{count}"


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
