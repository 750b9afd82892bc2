"""bench/slim_clone.py: a bare clone of some commits' trees, that the real-bug benchmark can use."""
from __future__ import annotations

import io
import subprocess
import sys
import tarfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def _git(repo: Path, *args: str) -> str:
    env = {"GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@example.com", "GIT_COMMITTER_NAME": "t",
           "GIT_COMMITTER_EMAIL": "t@example.com", "HOME": str(repo), "PATH": "/usr/bin:/bin"}
    return subprocess.run(["git", *args], cwd=repo, env=env, check=True, capture_output=True, text=True).stdout.strip()


def test_a_slim_clone_serves_the_commits_paths_and_nothing_else(tmp_path: Path) -> None:
    src = tmp_path / "lib"
    (src / "pkg").mkdir(parents=True)
    (src / "data").mkdir()
    (src / "pkg" / "k.py").write_text("x = 1\n")
    (src / "data" / "big.bin").write_bytes(b"\0" * 100_000)
    _git(src, "init", "-q", "-b", "main")
    _git(src, "add", "-A")
    _git(src, "commit", "-qm", "buggy")
    buggy = _git(src, "rev-parse", "HEAD")
    (src / "pkg" / "k.py").write_text("x = 2\n")
    _git(src, "commit", "-qam", "fix")
    fix = _git(src, "rev-parse", "HEAD")
    dest = tmp_path / "slim.git"
    r = subprocess.run([sys.executable, str(ROOT / "bench" / "slim_clone.py"), str(src), str(dest), buggy, fix,
                        "--path", "pkg"], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    assert "2 commit(s)" in r.stdout
    # what the benchmarks do with it: the package at each commit, and the fix's diff
    tar = subprocess.run(["git", "--git-dir", str(dest), "archive", "--format=tar", buggy, "pkg"],
                         check=True, capture_output=True).stdout
    with tarfile.open(fileobj=io.BytesIO(tar)) as t:
        assert t.extractfile("pkg/k.py").read() == b"x = 1\n"  # type: ignore[union-attr]
    diff = subprocess.run(["git", "--git-dir", str(dest), "diff", buggy, fix, "--", "pkg"], check=True,
                          capture_output=True, text=True).stdout
    assert "-x = 1" in diff and "+x = 2" in diff
    assert _git(dest, "log", "--format=%s", fix) == "fix"  # the parent is cut off by ``shallow``
    # the data outside --path did not come along
    big = _git(src, "rev-parse", f"{buggy}:data/big.bin")
    gone = subprocess.run(["git", "--git-dir", str(dest), "cat-file", "-e", big], capture_output=True)
    assert gone.returncode != 0
    again = subprocess.run([sys.executable, str(ROOT / "bench" / "slim_clone.py"), str(src), str(dest), fix],
                           capture_output=True, text=True)
    assert again.returncode != 0 and "already exists" in again.stderr
