"""Stopping a run from outside: SIGTERM and SIGINT kill every running job's sandbox, and the jobs
they held, and those not yet started, come back as interrupted."""
from __future__ import annotations

import contextlib
import os
import signal
import threading
from collections.abc import Callable, Iterator
from typing import Any
from ..findings import Finding, JobResult, Severity


class RunControl:
    """Stops a run from outside (a signal handler): kills every running job's process group
    (a sandbox dies with its outer process) and makes the jobs report as interrupted."""

    def __init__(self) -> None:
        self.reason: str | None = None
        self._running: set[int] = set()
        self._lock = threading.Lock()

    def cancel(self, reason: str) -> None:
        with self._lock:
            if self.reason is None:
                self.reason = reason
            running = list(self._running)
        for pid in running:
            _kill_group(pid)

    def started(self, pid: int) -> None:
        with self._lock:
            self._running.add(pid)
            cancelled = self.reason is not None
        if cancelled:  # the signal came between the start and this call
            _kill_group(pid)

    def ended(self, pid: int | None) -> None:
        with self._lock:
            self._running.discard(pid or -1)


@contextlib.contextmanager
def cancel_on_signals(control: RunControl) -> Iterator[None]:
    """While inside, SIGTERM and SIGINT cancel the run instead of killing gpu-gate: every job's
    sandbox is killed, the run ends, and the caller writes the reports with what finished."""

    def handler(signum: int, _frame: Any) -> None:
        control.cancel(f"interrupted by {signal.Signals(signum).name}")

    if threading.current_thread() is not threading.main_thread():
        yield  # signal handlers can only be set from the main thread
        return
    old = {s: signal.signal(s, handler) for s in (signal.SIGTERM, signal.SIGINT)}
    try:
        yield
    finally:
        for s, h in old.items():
            signal.signal(s, h)


def interrupted_finding(reason: str) -> Finding:
    return Finding(check="gate", kind="interrupted", severity=Severity.ERROR,
                   message=f"the run was {reason}: every running job was killed, and the reports show what finished")


def _kill_group(pid: int) -> None:

    try:
        os.killpg(pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


ProgressFn = Callable[[JobResult, int, int, float], None]
