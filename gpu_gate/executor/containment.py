"""One process tree, contained: run it in the job's sandbox, count what outlived it, end what a
tool outside the sandbox leaves, and say when the sandbox never started."""
from __future__ import annotations

import dataclasses
import os
import signal
import tempfile
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import NamedTuple
from . import orphans, sandbox, tool_launch
from .leftovers import Left, read_left
from .. import proc
from .argv import _layout, _niced
from .control import RunControl
from .options import ExecOptions


def _contained_run(argv: list[str], opts: ExecOptions, gpu: str | None, workdir: Path, env: dict[str, str],
                   timeout: float, avail: sandbox.Available, control: RunControl, extra_fds: tuple[int, ...] = (),
                   on_start: Callable[[int], None] | None = None, source: Path | None = None,
                   lent: tuple[tuple[Path, Path], ...] = (),
                   tool: Sequence[str] = (), stdin: bytes | None = None,
                   on_running: Callable[[], None] | None = None) -> Contained:
    """Run ``argv`` in the sandbox; also return how many processes outlived the worker (they
    are dead by the time this returns), whether a process of the job killed the sandbox's
    waiter, which counts them (possible only where a tool watches from outside: the waiter is then
    not PID 1; the sandbox dies with it, so what it would have counted is dead too), how many
    of the sandbox's own processes the gate had to end, and whether the sandbox never started
    the worker (both only under a tool outside: see :class:`_ToolWatch`).
    ``extra_fds``: descriptors the process inherits (its end of the socket to the judge);
    ``source``: the tree shown at the repository's path (the base's); ``lent``: (a directory of the
    gate's, where the sandbox shows it read-only: the kept kernels); ``tool``: compute-sanitizer's
    command line, run with the sandbox as its program (outside a bwrap sandbox; inside an unshare
    one, before the worker). The result's exit code is then the tool's, else the worker's.
    ``stdin``: what the worker reads on its standard input (a judged worker's boot program).
    ``on_running``: called once the sandbox has started the worker (under a tool outside, when the
    waiter says so; else as soon as the process is started); never for a stuck sandbox."""
    with tempfile.TemporaryFile() as count:
        layout = _layout(opts, gpu, workdir, avail, source, lent)
        feed = tool_launch.feed(avail, layout, tool)
        full = _niced(sandbox.wrap(avail, layout, argv, count.fileno(), tool,
                                   args_fd=feed.read_fd if feed is not None else None), opts)
        start = orphans.boot_ticks()
        pid: list[int] = []

        def started(p: int) -> None:
            pid.append(p)
            control.started(p)
            if on_start is not None:
                on_start(p)
            if feed is not None:
                feed.start(p)
            if watch is None and on_running is not None:
                on_running()

        watch = None
        if tool and avail.works and avail.tool_outside and avail.path is not None:
            # The sandbox's leftovers come to the gate, not to init, where the sweep below finds them.
            orphans.become_subreaper()
            watch = _ToolWatch(count.fileno(), avail.path, on_running)
        try:
            pr = proc.run(full, cwd=opts.repo_root, env=env, timeout=timeout, input=stdin,
                          on_start=watch.wrap(started) if watch is not None else started,
                          pass_fds=(count.fileno(),) + extra_fds
                          + ((feed.read_fd,) if feed is not None else ()))
        finally:
            if feed is not None:
                feed.close()
            control.ended(pid[0] if pid else None)
            ended = watch.finish(start) if watch is not None else 0
        if avail.works:
            count.seek(0)
            text = count.read().decode(errors="replace")
            status, n = sandbox.read_waiter(text)
            if status is not None and pr.returncode is not None and not tool:
                pr = dataclasses.replace(pr, returncode=status)  # the worker's, not the wrapper's
            # Under a tool outside, the waiter is not PID 1: started, never finished, and the gate did
            # not kill it, a process inside did.
            unwatched = (bool(tool) and avail.tool_outside and status is None and sandbox.waiter_started(text)
                         and not pr.timed_out and control.reason is None)
            return Contained(pr, n, unwatched, ended, watch is not None and watch.stuck,
                             watch.started_s if watch is not None else None, tuple(read_left(text)))
        # No sandbox: the worker's reaper (gpu_gate.executor.reaper) counted and killed what it left.
        count.seek(0)
        text = count.read().decode(errors="replace")
        status, n = sandbox.read_waiter(text)
        if status is not None and pr.returncode is not None:
            pr = dataclasses.replace(pr, returncode=status)  # the worker's (or the tool's), not the reaper's
        # A reaper that did not finish (killed at the job's end or its timeout, or by the code under
        # test) left the job's leftovers to gpu-gate: hunted and counted here. Where it finished,
        # what gpu-gate adopted meanwhile is another job's whose reaper was killed: killed, not
        # counted against this job (that job's own hunt counts what it finds first).
        strays = _hunt_orphans(start)
        return Contained(pr, n + (strays if status is None else 0), False, 0, left=tuple(read_left(text)))


class Contained(NamedTuple):
    """What :func:`_contained_run` saw: the run, the processes that outlived the worker, whether the
    waiter was killed from inside, the sandbox processes the gate ended after the worker, and
    whether a sandbox watched by a tool never started its worker (:class:`_ToolWatch`)."""

    pr: proc.ProcResult
    escaped: int
    unwatched: bool
    ended: int
    stuck: bool = False
    started_s: float | None = None  # under a tool outside: how long the sandbox took to start its worker
    left: tuple[Left, ...] = ()  # the processes that outlived the worker, as the waiter named them


# How long a sandbox watched by a tool may stay after its worker has ended before the gate ends it.
TOOL_EXIT_GRACE_S = 20.0


# How long it may take to start its worker (the waiter's first word: the tool's own start and
# bwrap's; compute-sanitizer's --launch-timeout, for the worker's first CUDA call, is 60 s). On an
# H100 with the demo's 14 jobs running, the sandboxes that started did so in 0.2-0.4 s, and 13 of 19
# runs had one that never did: a hang, not a slow start. A run that passes the limit is tried
# again, up to STUCK_ATTEMPTS runs in all: a short limit and more runs cost less and fail less
# often than a long one (three runs of 30 s failed 2 of 8 jobs there).
TOOL_START_LIMIT_S = 10.0


# A stuck sandbox is started again, the same worker on the same socket, up to SANDBOX_STARTS
# times (the other worker of the job runs on meanwhile), after a wait that grows with each start
# (RESTART_WAITS_S); a job whose sandbox never started in all of them is run again whole, up to
# STUCK_ATTEMPTS runs. On two H200s at two gates per GPU, 33 of 56 sanitizer jobs met the hang at
# least once. With six starts at once (no wait), 88 jobs there: 6 of their 176 sandboxes failed all
# six starts, where independent failures at that rate would do so about once in a thousand, and 5 of
# those 6 jobs' whole runs again started at once: the hang comes in spells, which starts spread over
# a minute and a half outlast better than starts in a row.
SANDBOX_STARTS = 8
RESTART_WAITS_S = (1.0, 2.0, 4.0, 8.0, 8.0, 8.0, 8.0)  # before the 2nd, 3rd, ... start
STUCK_ATTEMPTS = 2


class _ToolWatch:
    """Under a tool outside a bwrap sandbox: once the waiter has written the worker's end, nothing
    is left for the sandbox to run. If its processes are still there after
    :data:`TOOL_EXIT_GRACE_S`, the gate kills them (:func:`orphans.end_watched_sandbox`), so that
    the tool sees its program end and writes its report; if the tool is still there after as long
    again, its whole process group. A sandbox that has not started its worker
    :data:`TOOL_START_LIMIT_S` after it began is ended the same way, and the run is ``stuck``.

    Measured on an H100: bwrap's init, cloned from a bwrap that the tool had injected (its
    libraries loaded, a second thread running), now and then spun at full CPU from its first
    instant, before it started the waiter. The tool said "No attachable process found ... Awaiting
    target completion" and waited for ever; so did the judge (the init held the worker's end of
    their socket) and the gate, until the job's time limit, and the init outlived them all. When
    the run ends, what the sandbox left re-parented to the gate is killed too (:meth:`finish`)."""

    def __init__(self, fd: int, bwrap: str, on_running: Callable[[], None] | None = None) -> None:
        self.fd, self.bwrap = fd, bwrap
        self.on_running = on_running
        self.root: int | None = None
        self.ended = 0
        self.stuck = False
        self.started_s: float | None = None
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)

    def wrap(self, started: Callable[[int], None]) -> Callable[[int], None]:
        def on_start(pid: int) -> None:
            started(pid)
            self.root = pid
            self.thread.start()
        return on_start

    def _said(self) -> str:
        try:
            return os.pread(self.fd, 4096, 0).decode(errors="replace")
        except OSError:
            return ""

    def _run(self) -> None:
        began = time.monotonic()
        while not sandbox.waiter_started(self._said()):
            if time.monotonic() - began > TOOL_START_LIMIT_S:
                self.stuck = True
                break
            if self.stop.wait(0.2):
                return
        if not self.stuck:
            self.started_s = round(time.monotonic() - began, 2)
            if self.on_running is not None:
                self.on_running()
            while sandbox.read_waiter(self._said())[0] is None:
                if self.stop.wait(0.2):
                    return
            if self.stop.wait(TOOL_EXIT_GRACE_S):
                return
        if self.root is None:
            return
        self.ended = orphans.end_watched_sandbox(self.root, self.bwrap)
        if self.stop.wait(TOOL_EXIT_GRACE_S):
            return
        try:
            os.killpg(self.root, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass

    def finish(self, start: int) -> int:
        """Stop watching; kill what the sandbox left re-parented to the gate; return how many of its
        processes the gate ended."""
        self.stop.set()
        if self.thread.is_alive():
            self.thread.join()
        return self.ended + _hunt_orphans(start)


def _hunt_orphans(start: int) -> int:
    """Without a sandbox: kill what the job left running outside its process group (a ``setsid``
    daemon, re-parented to the gate, which is the subreaper; see ``execute``)."""
    total = 0
    for _ in range(20):  # a killed daemon's own children are adopted next
        time.sleep(0.05)
        found = orphans.adopted_since(start)
        if not found:
            break
        total += len(found)
        orphans.kill_and_reap(found)
    return total
