"""The reaper a worker runs under without a sandbox (gpu_gate.executor.reaper): the worker's exit
status comes through as it was, and what the worker leaves running is named, killed and counted
by the reaper, not by gpu-gate, where other jobs' leftovers would meet it."""
from __future__ import annotations

import os
import sys
import tempfile
import time

from gpu_gate import proc
from gpu_gate.executor import leftovers, sandbox


def _under_reaper(code: str) -> tuple[proc.ProcResult, str]:
    with tempfile.TemporaryFile() as count:
        pr = proc.run([*sandbox.reaper_argv(count.fileno()), sys.executable, "-c", code], timeout=60,
                      pass_fds=(count.fileno(),))
        count.seek(0)
        return pr, count.read().decode()


def _alive(marker: str) -> bool:
    for entry in os.listdir("/proc"):
        try:
            if entry.isdigit() and marker.encode() in open(f"/proc/{entry}/cmdline", "rb").read():
                return True
        except OSError:
            pass
    return False


def test_the_workers_exit_status_and_its_signal_come_through() -> None:
    pr, text = _under_reaper("import sys; sys.exit(3)")
    assert sandbox.read_waiter(text) == (3, 0) and pr.returncode == 3
    pr, text = _under_reaper("import os, signal; os.kill(os.getpid(), signal.SIGSEGV)")
    assert sandbox.read_waiter(text) == (-11, 0)
    assert text.startswith("started\n")


def test_a_program_that_cannot_start_is_127_and_says_why() -> None:
    with tempfile.TemporaryFile() as count:
        pr = proc.run([*sandbox.reaper_argv(count.fileno()), "/nonexistent/worker"], timeout=60,
                      pass_fds=(count.fileno(),))
        count.seek(0)
        assert sandbox.read_waiter(count.read().decode()) == (127, 0)
    assert "cannot start /nonexistent/worker" in pr.stderr


def test_a_daemon_and_an_unwaited_child_are_named_killed_and_counted() -> None:
    marker = f"reaper-test-{os.getpid()}-{time.monotonic_ns()}"
    code = ("import subprocess, time\n"
            f"subprocess.Popen(['sh', '-c', 'sleep 300; : {marker}-child'])\n"
            f"subprocess.run(['sh', '-c', \"setsid sh -c ': {marker}-daemon; while true; do sleep 0.2; done' "
            ">/dev/null 2>&1 &\"], check=True)\n"
            "time.sleep(0.3)\n")
    pr, text = _under_reaper(code)
    status, n = sandbox.read_waiter(text)
    # the two shells and what each runs (a sleep), as many as the reaper named
    assert status == 0 and n == len(leftovers.read_left(text)) >= 3, text
    named = {p.cmdline: p for p in leftovers.read_left(text)}
    assert any(f"{marker}-daemon" in c for c in named) and any(f"{marker}-child" in c for c in named), text
    daemon = next(p for c, p in named.items() if f"{marker}-daemon" in c)
    assert daemon.ppid == 1  # adopted by the reaper, said as a sandbox's init would be
    assert not _alive(marker)


def test_a_child_the_worker_waited_for_is_not_counted() -> None:
    pr, text = _under_reaper("import subprocess; subprocess.run(['sleep', '0.1'], check=True)")
    assert sandbox.read_waiter(text) == (0, 0) and not leftovers.read_left(text)
