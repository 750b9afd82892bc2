"""How a sandbox watched by compute-sanitizer is started: ways around the tool's now-and-then
crash (exit code 139, no report) and the bwrap-init hang, each switched on by the runner's
environment so that it can be measured against the plain start on a GPU
(``GPU_GATE_TOOL_LAUNCH``, a comma-separated list; default ``plain``):

- ``args-pipe``: the watched bwrap reads its options from a pipe (``bwrap --args FD``), which the
  gate fills only once every thread of that bwrap process is asleep. The hang is bwrap's init,
  cloned from a bwrap the tool has injected, spinning from its first instant: a clone taken while
  another thread (the tool's) holds a lock inherits the lock and never gets it. A bwrap blocked in
  ``read`` on the pipe is single-purpose; its clone is taken after the injected thread has settled.
- ``filter``: the tool injects itself only into the worker's interpreter, not into the bwrap and
  shell processes between the tool and the worker (``--target-processes-filter``, where the tool's
  ``--help`` lists it). The hang and the crashes of intermediate processes ("intermediate process
  terminated by signal 11", reported against compute-sanitizer on other projects) are in code the
  tool injected into processes it need not watch.
- ``blocking``: ``--force-blocking-launches``, which the tool's documentation gives for its host
  memory footprint (a project's sanitizer runs crashed with segfaults under load that it could not
  reproduce alone)."""
from __future__ import annotations

import os
import threading
import time
from pathlib import Path

from .. import procstat
from . import orphans, sandbox
from ..cuda.tool_launch import modes

def feed(avail: sandbox.Available, layout: sandbox.Layout, tool: object) -> ArgFeed | None:
    """The pipe that a watched bwrap reads its options from, where ``args-pipe`` is on and a tool
    watches a bwrap sandbox from outside; else None (the options are on its command line)."""
    if not tool or "args-pipe" not in modes() or avail.kind != "bwrap" or avail.path is None:
        return None
    return ArgFeed(sandbox.bwrap_options(layout, watched=True), avail.path)


# How long the fill waits for the watched bwrap to be asleep before it fills the pipe anyway, and
# how many polls in a row must find every thread asleep.
SETTLE_LIMIT_S = 5.0
QUIET_POLLS = 3


class ArgFeed:
    """Fills a watched bwrap's ``--args`` pipe once its threads are asleep (see the module's text)."""

    def __init__(self, payload: list[str], bwrap: str) -> None:
        self.read_fd, self.write_fd = os.pipe()
        os.set_inheritable(self.read_fd, True)
        self.payload = "".join(a + "\0" for a in payload).encode()
        self.bwrap = os.path.realpath(bwrap)
        self.settled_s: float | None = None  # how long it waited, for the job's timing
        self.thread: threading.Thread | None = None

    def start(self, root: int) -> None:
        os.close(self.read_fd)  # the tool's tree holds it now
        self.thread = threading.Thread(target=self._fill, args=(root,), daemon=True)
        self.thread.start()

    def _fill(self, root: int) -> None:
        began = time.monotonic()
        quiet = 0
        while time.monotonic() - began < SETTLE_LIMIT_S and quiet < QUIET_POLLS:
            pid = self._waiting_bwrap(root)
            quiet = quiet + 1 if pid is not None and _asleep(pid) else 0
            time.sleep(0.05)
        self.settled_s = round(time.monotonic() - began, 2)
        try:
            view = memoryview(self.payload)
            while view:
                view = view[os.write(self.write_fd, view):]
        except OSError:
            pass  # the tool's tree is gone: nothing reads the pipe
        finally:
            os.close(self.write_fd)

    def _waiting_bwrap(self, root: int) -> int | None:
        for pid in orphans.descendants(root):
            try:
                if os.readlink(f"/proc/{pid}/exe") != self.bwrap:
                    continue
                if b"--args" in Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0"):
                    return pid
            except OSError:
                continue
        return None

    def close(self) -> None:
        if self.thread is None:
            for fd in (self.read_fd, self.write_fd):
                try:
                    os.close(fd)
                except OSError:
                    pass
        else:
            self.thread.join(SETTLE_LIMIT_S + 5)


def _asleep(pid: int) -> bool:
    """Whether every thread of ``pid`` is asleep (S) or stopped in the kernel (D): none running."""
    try:
        tasks = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return False
    states = [procstat.fields(pid, t) for t in tasks]
    return bool(states) and all(f is not None and f[:1] in (["S"], ["D"]) for f in states)
