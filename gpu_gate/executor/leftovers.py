"""Processes a job's sandbox left running, named and compared with the base's (issue 40, part 4).

The sandbox's waiter names each process still alive after its worker exited (``left PID PPID
TICKS CMDLINE``: see :data:`gpu_gate.executor.sandbox.WAITER`). An ``escaped-process`` finding says
which processes, who started them and when, so that a library's helper is told from an attack.
In a differential run the comparison decides: a process the base's code leaves too (the same
command line, in the base's worker or the reference's, which run the base's tree) is the
repository's habit, reported as pre-existing and blocking only where the policy says
``preexisting: fail``; one only the change's code leaves blocks, as does a process left where
there is no base to compare with, one the waiter could not name, and a waiter killed from inside.
"""
from __future__ import annotations

import dataclasses
import os
import re
from collections.abc import Mapping, Sequence
from pathlib import Path

from ..findings import Finding, JobResult, Severity, Status

__all__ = ["Left", "judge_escapes", "known_helper", "read_left"]

HEAD_ROLE = "candidate"  # by default, the worker that runs the change's code; the others run the base's tree
MAX_NAMED = 20  # the waiter names this many (see WAITER); the count counts them all
# Helpers that libraries start at import and leave running, as a pool that outlives one call:
# named as such in the report (a change that adds one still blocks).
HELPERS = (
    (re.compile(r"torch/_inductor/compile_worker|compile_worker"), "torch's compile-worker pool"),
    (re.compile(r"multiprocessing\.resource_tracker"), "multiprocessing's resource tracker"),
    (re.compile(r"multiprocessing\.forkserver"), "multiprocessing's fork server"),
    (re.compile(r"--multiprocessing-fork|multiprocessing\.spawn"), "a multiprocessing pool worker"),
)


@dataclasses.dataclass(frozen=True)
class Left:
    """One process the waiter found alive: its PID and its parent's in the sandbox, when it started
    (seconds after the waiter) and its command line."""

    pid: int
    ppid: int
    started_s: float
    cmdline: str


def read_left(text: str) -> list[Left]:
    """The processes named in what the waiter wrote."""
    try:
        tick = float(os.sysconf("SC_CLK_TCK"))
    except (ValueError, OSError):
        tick = 100.0
    out = []
    for line in text.splitlines():
        parts = line.split(" ", 4)
        if len(parts) == 5 and parts[0] == "left" and all(p.lstrip("-").isdigit() for p in parts[1:4]):
            out.append(Left(int(parts[1]), int(parts[2]), int(parts[3]) / tick, parts[4].strip()))
    return out


def known_helper(cmdline: str) -> str | None:
    return next((what for pattern, what in HELPERS if pattern.search(cmdline)), None)


def _key(cmdline: str, places: Sequence[Path]) -> str:
    """A command line as compared across the head's worker and the base's: its job directory, and
    numbers (descriptors, PIDs, ports), aside."""
    for p in sorted((str(x) for x in places), key=len, reverse=True):
        cmdline = cmdline.replace(p, "<job>")
    return re.sub(r"\d+", "N", cmdline)


def _describe(p: Left, siblings: Sequence[Left]) -> str:
    parent = next((s for s in siblings if s.pid == p.ppid), None)
    if parent is not None:
        who = f"started by PID {parent.pid} ({parent.cmdline[:80]})"
    elif p.ppid <= 2:
        who = "its parent gone (re-parented to the sandbox's init, or without a sandbox to the worker's reaper)"
    else:
        who = f"started by PID {p.ppid}"
    helper = known_helper(p.cmdline)
    what = f" - {helper}" if helper else ""
    return f"PID {p.pid}: {p.cmdline[:300]!r}{what}; {who}; started {p.started_s:.2f}s into the job"


def judge_escapes(result: JobResult, counts: Mapping[str, int], left: Mapping[str, Sequence[Left]],
                  places: Sequence[Path], differential: bool, unwatched: bool, how: str,
                  head: str = HEAD_ROLE) -> JobResult:
    """``result`` with the escaped-process findings of its workers: ``counts`` and ``left`` per
    worker role (how many the waiter counted, and those it named); ``places``: the job's
    directories (left out of the comparison); ``differential``: the base's code ran the same job;
    ``head``: the role of the worker that runs the change's code (the compile check's is its
    compiler), every other role's processes being the base's or the truth's."""
    base_keys = {_key(p.cmdline, places) for role, ps in left.items() if role != head for p in ps}
    new: list[str] = []
    old: list[str] = []
    for role, n in counts.items():
        named = list(left.get(role, ()))
        for p in named:
            line = _describe(p, named)
            ours = role == head
            if differential and (not ours or _key(p.cmdline, places) in base_keys):
                old.append(line if ours else f"{line} (the base's code, in its {role} worker)")
            else:
                new.append(line)
        if n > len(named):
            unnamed = f"{n - len(named)} more process(es) in the {role} worker, not named"
            (old if differential and role != head else new).append(unnamed)
    findings = list(result.findings)
    if new or unwatched:
        findings.append(_finding(result, _new_message(new, unwatched, how), new, "new" if differential else None))
    if old:
        findings.append(_finding(result, f"pre-existing (the base's code leaves the same process(es) running after its "
                                         f"worker exits, {how}): " + "; ".join(old), old, "pre-existing"))
    if not (new or unwatched):
        return dataclasses.replace(result, findings=findings)
    status = Status.FAILED if result.status is Status.PASSED else result.status
    return dataclasses.replace(result, status=status, level="required", findings=findings)


def _new_message(new: list[str], unwatched: bool, how: str) -> str:
    message = (f"the job left {len(new)} process(es) running after its worker exited ({how}): code under test "
               f"must not outlive its job" + (": " + "; ".join(new) if new else ""))
    if unwatched:
        message = ("a process of the job killed the sandbox's waiter, which counts the processes left behind "
                   "(everything in the sandbox was killed with it): code under test must not tamper with its "
                   "sandbox" + (f"; and {message}" if new else ""))
    return message


def _finding(result: JobResult, message: str, processes: list[str], change: str | None) -> Finding:
    details: dict[str, object] = {"processes": processes}
    if change:
        details["change"] = change
    return Finding(check=result.check, kind="escaped-process", severity=Severity.ERROR, spec=result.spec,
                   message=message, details=details)
