"""The parent of a worker that runs without a sandbox: what the worker leaves running is its job's.

Without a PID namespace, a process a job leaves behind (a ``setsid`` daemon, a background child
the worker did not wait for) is re-parented to the nearest subreaper above it. Were that gpu-gate
itself, the leftovers of every job running at the time would meet there, and the first job to end
after an escape would be blamed for it while the job that made it went clean. So each worker runs
under this small program, its own subreaper: a job's leftovers come to its own reaper. When the
worker (or the tool that runs it) exits, the reaper names, kills and counts every process still
below it, and writes what a sandbox's waiter writes (see :data:`gpu_gate.executor.sandbox.WAITER`):
``started``, then ``left PID PPID TICKS CMDLINE`` for each of the first 20 processes (TICKS: when it
started, in clock ticks after the reaper), then ``STATUS COUNT`` (the worker's exit status, 128 plus
the signal for a signal, and how many processes outlived it).

It is run by path, ``python -I -S reaper.py FD PROGRAM ARGS...``, on the standard library and
gpu-gate's reader of /proc (:mod:`gpu_gate.procstat`, loaded from its file) alone.
It is not a boundary: code under test that runs as gpu-gate's user can kill it (then its leftovers
go to gpu-gate, which hunts them as before: :mod:`gpu_gate.executor.containment`).
"""
from __future__ import annotations

import ctypes
import importlib.util
import os
import signal
import sys
import time
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from gpu_gate.procstat import Stat

PR_SET_CHILD_SUBREAPER = 36
MAX_NAMED = 20  # as the sandbox's waiter (gpu_gate.executor.leftovers.MAX_NAMED)
ROUNDS = 20  # a killed process's own children come to the reaper next: looked for again


def _procstat() -> ModuleType:
    """gpu_gate/procstat.py, the one reader of /proc/PID/stat, loaded from its file: this program runs
    without site-packages (``-S``) and imports nothing of gpu-gate's package itself."""
    spec = importlib.util.spec_from_file_location("gpu_gate_procstat", Path(__file__).resolve().parent.parent
                                                  / "procstat.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses looks its module up
    spec.loader.exec_module(module)
    return module


def _below(procstat: ModuleType, me: int) -> list[tuple[int, Stat]]:
    """Every live process below this one, with its Stat (zombies are only reaped)."""
    children: dict[int, list[tuple[int, Stat]]] = {}
    for pid in procstat.pids():
        st = procstat.stat(pid)
        if st is not None:
            children.setdefault(st.ppid, []).append((pid, st))
    found: list[tuple[int, Stat]] = []
    todo = [me]
    while todo:
        for pid, st in children.get(todo.pop(), []):
            todo.append(pid)
            if st.state != "Z":
                found.append((pid, st))
    return found


def _name(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            cmd = f.read().replace(b"\0", b" ").decode(errors="replace").strip()
    except OSError:
        cmd = ""
    return " ".join(cmd.split())[:400] or "[?]"


def _reap_all() -> None:
    while True:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return


def main(argv: list[str]) -> int:
    fd, program = int(argv[1]), argv[2:]
    me = os.getpid()
    try:
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
    except (OSError, AttributeError):
        pass  # leftovers then go to gpu-gate, which hunts them
    procstat = _procstat()
    mine = procstat.stat(me)
    t0 = mine.start_ticks if mine is not None else 0
    out = os.fdopen(fd, "w", buffering=1)
    out.write("started\n")
    child = os.fork()
    if child == 0:
        try:
            os.close(fd)
            os.execvp(program[0], program)
        except OSError as exc:
            os.write(2, f"gpu-gate: cannot start {program[0]}: {exc}\n".encode())
        os._exit(127)
    while True:  # the worker's end; orphans that end meanwhile are reaped on the way
        pid, status = os.waitpid(-1, 0)
        if pid == child:
            break
    code = os.waitstatus_to_exitcode(status)
    rc = 128 - code if code < 0 else code
    seen: set[tuple[int, int]] = set()
    for _ in range(ROUNDS):
        left = [(pid, st) for pid, st in _below(procstat, me) if (pid, st.start_ticks) not in seen]
        if not left:
            break
        for pid, st in left:
            if len(seen) < MAX_NAMED:
                # a parent of 1: adopted by the reaper, as a sandbox's init adopts (see leftovers)
                ppid = 1 if st.ppid == me else st.ppid
                out.write(f"left {pid} {ppid} {st.start_ticks - t0} {_name(pid)}\n")
            seen.add((pid, st.start_ticks))
        for pid, _ in left:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        time.sleep(0.05)
        _reap_all()
    _reap_all()
    out.write(f"{rc} {len(seen)}\n")
    out.close()
    return rc


if __name__ == "__main__":
    sys.exit(main(sys.argv))
