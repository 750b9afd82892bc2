"""``--keep-job-dirs`` copies a job's files and directories, never its pipes or sockets.

compute-sanitizer leaves named pipes (``NVIDIA-treetracker-*/pipe-*``) in the worker's directory;
copying one made every sanitizer job an internal error on an H200 with ``--keep-job-dirs``."""
from __future__ import annotations

import os
import shutil
import socket
from pathlib import Path

import pytest

from gpu_gate.executor.keep import keep
from gpu_gate.executor.options import ExecOptions
from gpu_gate.executor.scheduling import execute
from gpu_gate.findings import Status
from test_executor import _jobs


def _tree(root: Path) -> Path:
    work = root / "w"
    (work / "NVIDIA-treetracker-1").mkdir(parents=True)
    os.mkfifo(work / "NVIDIA-treetracker-1" / "pipe-0")
    (work / "log.txt").write_text("kept")
    (work / "scratch.tmp").write_text("dropped")
    s = socket.socket(socket.AF_UNIX)
    s.bind(str(work / "sock"))
    s.close()
    (root / "memcheck.w.xml").write_text("<ComputeSanitizerOutput/>")
    return work


def test_the_plain_copy_raises_on_a_pipe(tmp_path: Path) -> None:
    """What the gate did before: the copy of a job directory with the tool's pipe in it fails."""
    work = _tree(tmp_path)
    with pytest.raises(shutil.Error, match="named pipe"):
        shutil.copytree(work, tmp_path / "plain", ignore=shutil.ignore_patterns("*.tmp"))


def test_keep_copies_files_and_skips_pipes_and_sockets(tmp_path: Path) -> None:
    work = _tree(tmp_path)
    dest = tmp_path / "kept"
    assert keep(work, tmp_path, dest) is None
    assert (dest / "log.txt").read_text() == "kept"
    assert (dest / "memcheck.w.xml").is_file()  # the tool's report, from beside the worker's directory
    assert (dest / "NVIDIA-treetracker-1").is_dir()
    assert not (dest / "NVIDIA-treetracker-1" / "pipe-0").exists()
    assert not (dest / "sock").exists() and not (dest / "scratch.tmp").exists()


# The candidate leaves a named pipe in its own directory (its TMPDIR), as the tool's collector does.
FIFO = ("import os, tempfile; p = os.path.join(tempfile.gettempdir(), 'pipe-0'); "
        "os.path.exists(p) or os.mkfifo(p); return x * 2")


def test_a_job_that_leaves_a_pipe_is_kept_and_judged(tmp_path: Path) -> None:
    jobs = _jobs(tmp_path, {"piped": FIFO})
    kept = tmp_path / "out" / "jobs"
    results = execute(jobs, ExecOptions(repo_root=tmp_path, gpus=(), timeout_s=600, workers=1, keep_workdirs=kept))
    assert [r.status for r in results] == [Status.PASSED], [(r.reason, r.findings) for r in results]
    dirs = list(kept.iterdir())
    assert len(dirs) == 1 and dirs[0].is_dir()  # (its context came on stdin: no context.json)
    assert not any(p.name == "pipe-0" for p in dirs[0].rglob("*"))
