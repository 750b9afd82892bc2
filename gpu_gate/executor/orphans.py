"""Hunting the processes a job leaves behind, from /proc: without a namespace the gate adopts what its
jobs start and leave (a subreaper), and a tool's watched sandbox is ended from outside. What a
sandbox holds in is :mod:`gpu_gate.executor.sandbox`'s; what the executor does with what escaped
is :mod:`gpu_gate.executor.containment`'s."""
from __future__ import annotations

import os
from collections.abc import Iterable

from .. import proc, procstat

_PR_SET_CHILD_SUBREAPER = 36


def become_subreaper() -> bool:
    """Make this process the one that orphans of its descendants are re-parented to (instead of
    init), so that a job's ``setsid`` daemon can still be found after the job. False where the
    kernel refuses."""
    import ctypes

    try:
        libc = ctypes.CDLL(None, use_errno=True)
        return int(libc.prctl(_PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)) == 0
    except (OSError, AttributeError):
        return False


def boot_ticks() -> int:
    """Now, in the unit of /proc/PID/stat's start time (clock ticks since boot)."""
    import time

    return int(time.clock_gettime(time.CLOCK_BOOTTIME) * os.sysconf("SC_CLK_TCK"))


def adopted_since(ticks: int) -> list[int]:
    """Processes re-parented to this one (not started by :func:`proc.run`) that began at or after
    ``ticks``: what a job started and left behind. Zombies among them are reaped."""
    me = os.getpid()
    found: list[int] = []
    for pid in procstat.pids():
        st = procstat.stat(pid)
        if st is None or st.ppid != me or st.start_ticks < ticks or proc.started_here(pid):
            continue
        if st.state == "Z":
            _reap(pid)
            continue
        found.append(pid)
    return found


def descendants(pid: int) -> list[int]:
    """Every process below ``pid``, from /proc (those that exit meanwhile may be missing)."""
    children: dict[int, list[int]] = {}
    for other in procstat.pids():
        st = procstat.stat(other)
        if st is not None:
            children.setdefault(st.ppid, []).append(other)
    found: list[int] = []
    todo = [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            found.append(child)
            todo.append(child)
    return found


def _exe(pid: int) -> str | None:
    try:
        return os.readlink(f"/proc/{pid}/exe")
    except OSError:
        return None


def end_watched_sandbox(root: int, bwrap: str) -> int:
    """Kill the bubblewrap processes below ``root`` (a tool's process tree whose program is a
    sandbox): the sandbox's monitor and its init, and with the init everything in its PID
    namespace. The tool itself and its launcher are left to see their program end and to write
    their report. Returns how many were killed."""
    target = os.path.realpath(bwrap)
    found = [p for p in descendants(root) if _exe(p) == target]
    kill_and_reap(found)  # not the gate's children: the tool's launcher reaps them
    return len(found)


def kill_and_reap(pids: Iterable[int]) -> None:
    import signal

    for pid in pids:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            continue
        _reap(pid, block=True)


def _reap(pid: int, block: bool = False) -> None:
    try:
        os.waitpid(pid, 0 if block else os.WNOHANG)
    except ChildProcessError:
        pass
