"""/proc/PID/stat read in one place: a command name with spaces and parentheses of its own does not
shift the fields; a process that is gone, or a line that cannot be read, is None."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from gpu_gate import procstat


def _fake(tmp_path: Path, pid: int, comm: str, rest: str) -> Path:
    (tmp_path / str(pid)).mkdir(parents=True)
    (tmp_path / str(pid) / "stat").write_text(f"{pid} ({comm}) {rest}\n")
    return tmp_path


def test_a_command_name_with_parentheses_and_spaces_does_not_shift_the_fields(tmp_path: Path) -> None:
    rest = "S 41 43 43 0 -1 4194560 " + " ".join(["0"] * 12) + " 98765 " + " ".join(["0"] * 10)
    proc = _fake(tmp_path, 42, "evil) R 1 1 (name", rest)
    s = procstat.stat(42, proc=proc)
    assert s == procstat.Stat("S", 41, 43, 98765)


def test_gone_or_unreadable_is_none(tmp_path: Path) -> None:
    assert procstat.stat(7, proc=tmp_path) is None
    assert procstat.stat(8, proc=_fake(tmp_path, 8, "short", "S 1")) is None  # too few fields
    assert procstat.fields(9, proc=_fake(tmp_path, 9, "x", "R 1 2")) == ["R", "1", "2"]


def test_this_process_as_linux_says() -> None:
    me = procstat.stat(os.getpid())
    assert me is not None and me.ppid == os.getppid() and me.pgrp == os.getpgrp() and me.state in ("R", "S")
    assert os.getpid() in procstat.pids()


def test_a_child_in_a_group_of_its_own() -> None:
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"], process_group=0)
    try:
        s = procstat.stat(child.pid)
        assert s is not None and s.pgrp == child.pid and s.ppid == os.getpid()
        threads = os.listdir(f"/proc/{child.pid}/task")
        assert threads and all((procstat.fields(child.pid, t) or ["?"])[0] in "RSD" for t in threads)
    finally:
        child.kill()
        child.wait()
    assert procstat.stat(child.pid) is None
