"""A process's line in ``/proc/PID/stat`` (Linux), read in one place for the gate and its workers.

The command name (field 2) is in parentheses and may hold spaces and parentheses of its own, so the
fields are split after its *last* closing parenthesis. Neither side decides anything here: the executor
reads its jobs' leftovers, the worker its compile sibling's group, the reservations a holder's age.
"""
from __future__ import annotations

import dataclasses
import os
from pathlib import Path

PROC = Path("/proc")


@dataclasses.dataclass(frozen=True)
class Stat:
    state: str  # R, S, D, Z, X, ... (proc(5), field 3)
    ppid: int  # field 4
    pgrp: int  # field 5: the process group
    start_ticks: int  # field 22: clock ticks after boot


def fields(pid: int | str, task: int | str | None = None, *, proc: Path = PROC) -> list[str] | None:
    """The fields after the command name of ``/proc/PID/stat`` (of thread ``task`` where given): the
    state first. None when the process is gone or the line cannot be read."""
    path = proc / str(pid) / "stat" if task is None else proc / str(pid) / "task" / str(task) / "stat"
    try:
        text = path.read_text()
    except OSError:
        return None
    end = text.rfind(")")
    return text[end + 1:].split() if end >= 0 else None


def stat(pid: int | str, *, proc: Path = PROC) -> Stat | None:
    """The state, parent, process group and start time of ``pid``; None when it is gone or unreadable."""
    f = fields(pid, proc=proc)
    try:
        return Stat(f[0], int(f[1]), int(f[2]), int(f[19])) if f else None
    except (IndexError, ValueError):
        return None


def pids(proc: Path = PROC) -> list[int]:
    """Every process id /proc lists now."""
    try:
        return [int(e) for e in os.listdir(proc) if e.isdigit()]
    except OSError:
        return []
