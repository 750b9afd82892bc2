"""The one place where gpu-gate starts other programs.

Every caller (git, nvcc, compute-sanitizer, the workers) goes through
:func:`run`. It returns the exit code and both output streams, kills the whole
process group on timeout, bounds how much output it keeps in memory, and turns a
missing executable into a result instead of an exception. A program started without
an explicit ``env`` gets :func:`scrubbed_env`: no external tool (a ``--version`` probe of
a path a policy names included) ever sees a token.
"""
from __future__ import annotations

import dataclasses
import os
import re
import shlex
import signal
import subprocess
import tempfile
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from typing import IO

# Keep at most this many bytes of each stream: a kernel that prints megabytes
# to stderr must not exhaust the runner's memory (we keep the head and the tail).
MAX_CAPTURE = 256 * 1024

_SECRET_NAME = re.compile(r"TOKEN|SECRET|PASSWORD|PASSWD|CREDENTIAL|(^|_)KEY($|_)|PRIVATE|AUTH", re.I)
_SECRET_PREFIXES = ("ACTIONS_", "GITHUB_TOKEN", "GH_", "RUNNER_TOKEN", "AWS_", "AZURE_", "GOOGLE_")
# The runner's command files: a line written to GITHUB_ENV or GITHUB_PATH changes the environment and
# PATH of every later step of the job, the one that publishes with the token included.
RUNNER_COMMAND_FILES = ("GITHUB_ENV", "GITHUB_PATH", "GITHUB_OUTPUT", "GITHUB_STATE", "GITHUB_STEP_SUMMARY")

# The processes :func:`run` started and has not yet reaped. Anything else whose parent is this
# process was adopted (see ``executor``: a job's orphan, when the gate is its subreaper).
_LIVE: set[int] = set()
_LIVE_LOCK = threading.Lock()


def started_here(pid: int) -> bool:
    with _LIVE_LOCK:
        return pid in _LIVE


@dataclasses.dataclass(frozen=True)
class ProcResult:
    argv: tuple[str, ...]
    returncode: int | None  # None: could not start, or killed on timeout
    stdout: str
    stderr: str
    duration_s: float
    timed_out: bool = False
    not_found: bool = False

    @property
    def ok(self) -> bool:
        return self.returncode == 0

    @property
    def signal(self) -> int | None:
        if self.returncode is not None and self.returncode < 0:
            return -self.returncode
        return None

    @property
    def signal_name(self) -> str | None:
        if not self.signal:
            return None
        try:
            return signal.Signals(self.signal).name
        except ValueError:
            return f"signal {self.signal}"

    def describe(self) -> str:
        """One line saying what happened, for error messages."""
        cmd = shlex.join(self.argv)
        if self.not_found:
            return f"`{self.argv[0]}` not found (command: {cmd})"
        if self.timed_out:
            return f"timed out after {self.duration_s:.0f}s: {cmd}"
        if self.signal:
            return f"killed by {self.signal_name}: {cmd}"
        return f"exit code {self.returncode}: {cmd}"

    def tail(self, lines: int = 30, stream: str = "stderr") -> str:
        text = self.stderr if stream == "stderr" else self.stdout
        return "\n".join(text.rstrip().splitlines()[-lines:])


def scrubbed_env(base: Mapping[str, str] | None = None, extra: Mapping[str, str] | None = None) -> dict[str, str]:
    """The environment for untrusted kernel code: no tokens, secrets, keys or Actions internals."""
    env = dict(os.environ if base is None else base)
    for name in list(env):
        if name.startswith(_SECRET_PREFIXES) or _SECRET_NAME.search(name) or name in RUNNER_COMMAND_FILES:
            del env[name]
    if extra:
        env.update(extra)
    return env


def _bounded(data: bytes) -> str:
    if len(data) > MAX_CAPTURE:
        half = MAX_CAPTURE // 2
        dropped = len(data) - MAX_CAPTURE
        data = data[:half] + f"\n[... {dropped} bytes cut ...]\n".encode() + data[-half:]
    return data.decode("utf-8", errors="replace")


def _kill_group(proc: subprocess.Popen[bytes]) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def run(
    argv: Sequence[str],
    *,
    cwd: str | os.PathLike[str] | None = None,
    env: Mapping[str, str] | None = None,
    timeout: float | None = None,
    input: bytes | None = None,
    pass_fds: Sequence[int] = (),
    on_start: Callable[[int], None] | None = None,
    stdin_fd: int | None = None,
) -> ProcResult:
    """Run ``argv`` in its own process group and wait, at most ``timeout`` seconds.

    Output goes to temporary files rather than pipes, so a child that writes a lot
    can never block on a full pipe, and only a bounded head and tail is read back.
    ``pass_fds``: descriptors the child inherits. ``on_start(pid)``: called once the child
    runs, with its pid (also its process group), for a caller that may have to kill it early.
    ``stdin_fd``: a descriptor the child reads as its standard input (the read end of a pipe the
    caller writes later; closed here once the child has it), instead of ``input`` or nothing.
    """
    argv = tuple(str(a) for a in argv)
    start = time.monotonic()
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        try:
            proc = subprocess.Popen(
                argv,
                cwd=cwd,
                env=scrubbed_env() if env is None else dict(env),
                stdin=stdin_fd if stdin_fd is not None else subprocess.PIPE if input is not None else subprocess.DEVNULL,
                stdout=out,
                stderr=err,
                start_new_session=True,
                pass_fds=tuple(pass_fds),
            )
        except (FileNotFoundError, PermissionError) as exc:
            return ProcResult(argv, None, "", str(exc), time.monotonic() - start, not_found=True)
        finally:
            if stdin_fd is not None:
                os.close(stdin_fd)  # the child's copy is its own: the caller keeps only the write end
        with _LIVE_LOCK:
            _LIVE.add(proc.pid)
        if on_start is not None:
            on_start(proc.pid)
        # A timer kills the group at the deadline while this thread blocks in waitpid:
        # no polling (Popen.wait(timeout) sleeps in steps of up to 50 ms).
        fired = threading.Event()

        def expire() -> None:
            fired.set()
            _kill_group(proc)

        timer = threading.Timer(timeout, expire) if timeout is not None else None
        if timer is not None:
            timer.daemon = True
            timer.start()
        try:
            if input is not None:
                assert proc.stdin is not None
                try:
                    proc.stdin.write(input)
                    proc.stdin.close()
                except BrokenPipeError:
                    pass
            proc.wait()
        except BaseException:
            _kill_group(proc)
            proc.wait()
            raise
        finally:
            if timer is not None:
                timer.cancel()
            with _LIVE_LOCK:
                _LIVE.discard(proc.pid)
        timed_out = fired.is_set()
        # Reap grandchildren the job left behind (a kernel's helper processes).
        _kill_group(proc)
        duration = time.monotonic() - start
        out.seek(0)
        err.seek(0)
        stdout = _read_bounded(out)
        stderr = _read_bounded(err)
    return ProcResult(argv, None if timed_out else proc.returncode, stdout, stderr, duration, timed_out=timed_out)


def _read_bounded(f: IO[bytes]) -> str:
    f.seek(0, os.SEEK_END)
    size = f.tell()
    if size <= MAX_CAPTURE:
        f.seek(0)
        return _bounded(f.read())
    half = MAX_CAPTURE // 2
    f.seek(0)
    head = f.read(half)
    f.seek(size - half)
    tail = f.read(half)
    return (head + f"\n[... {size - MAX_CAPTURE} bytes cut ...]\n".encode() + tail).decode("utf-8", errors="replace")


def alive_s() -> float:
    """Seconds since this process started (Linux), 0 where that cannot be read."""
    from pathlib import Path

    from . import procstat

    me = procstat.stat("self")
    try:
        uptime = float(Path("/proc/uptime").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 0.0
    return 0.0 if me is None else max(0.0, uptime - me.start_ticks / os.sysconf("SC_CLK_TCK"))
