"""``gpu-gate demo``: a small git repository with two changed Triton kernels, gated on the CPU.
The repository and the reports stay in the directory the demo names (``--out``, default
``gpu-gate-demo/``); nothing is deleted.

The base commit has two correct kernels. The head commit refactors one (still
correct) and plants a bug in the other: the RMSNorm divides the sum of squares
by the padded block width instead of the row length (the "variance counts the
padding lanes" bug). The Triton interpreter runs both on the CPU.
"""
from __future__ import annotations

import os
import shutil
from collections.abc import Callable, Sequence
from pathlib import Path

from .. import proc
from ..exitcodes import ExitCode

TEMPLATE = Path(__file__).resolve().parent.parent / "demo_repo"  # gpu_gate/demo_repo, shipped as package data
GIT_ENV = {"GIT_AUTHOR_NAME": "gpu-gate demo", "GIT_AUTHOR_EMAIL": "demo@example.invalid",
           "GIT_COMMITTER_NAME": "gpu-gate demo", "GIT_COMMITTER_EMAIL": "demo@example.invalid",
           "GIT_AUTHOR_DATE": "2026-01-01T00:00:00Z", "GIT_COMMITTER_DATE": "2026-01-01T00:00:00Z"}

# The head commit's edits: (file, old text, new text).
REFACTOR = ("kernels/axpby.py", "    BLOCK = 1024\n", "    BLOCK = 512  # smaller blocks: more programs in flight\n")
BUG = ("kernels/rmsnorm.py", "tl.sum(x * x, axis=0) / n_cols", "tl.sum(x * x, axis=0) / BLOCK")


def _git(repo: Path, *args: str) -> None:
    env = {**os.environ, **GIT_ENV}
    r = proc.run(["git", "-c", "init.defaultBranch=main", "-c", "commit.gpgsign=false", *args], cwd=repo, env=env,
                 timeout=60)
    if not r.ok:
        raise RuntimeError(f"git {' '.join(args)} failed: {r.stderr.strip()}")


def _edit(repo: Path, change: tuple[str, str, str]) -> None:
    path = repo / change[0]
    text = path.read_text()
    assert change[1] in text, f"demo template out of date: {change[1]!r} not in {change[0]}"
    path.write_text(text.replace(change[1], change[2]))


def build_repo(dest: Path) -> Path:
    shutil.copytree(TEMPLATE, dest, dirs_exist_ok=True, ignore=shutil.ignore_patterns("__pycache__"))
    _git(dest, "init", "-q")
    _git(dest, "add", "-A")
    _git(dest, "commit", "-q", "-m", "Two Triton kernels with gate specs")
    _git(dest, "checkout", "-q", "-b", "feature")
    _edit(dest, REFACTOR)
    _edit(dest, BUG)
    _git(dest, "commit", "-q", "-am", "Tune axpby block size; simplify rmsnorm mean")
    return dest


def run(where: Path, check: Callable[[list[str]], int], *, gpu: bool = False) -> int:
    """``gpu-gate demo``: the run's -q/-v/--color are passed on to the ``check`` it runs."""
    from . import output as out

    passed_on = [{0: "-q", 2: "-v"}[out.level()]] if out.level() != out.Level.NORMAL else []
    return run_demo(where, check, gpu=gpu, flags=[*passed_on, "--color", "always" if out.colour() else "never"])


def run_demo(where: Path, check: Callable[[list[str]], int], *, gpu: bool = False, flags: Sequence[str] = ()) -> int:
    """Build the example in ``where``/repo, gate it with the reports in ``where``/reports, and keep both:
    the paths printed at the end are there to be opened. ``check``: the command line's entry point,
    which runs ``gpu-gate check``; ``flags``: -q/-v/--color for it."""
    from . import output as out
    from ..errors import GateError
    from ..record import RunRecord
    from ..report.console import paint
    from ..report.formats import FILENAMES

    from ..extras import require

    require(("torch", "triton"), "gpu-gate demo")  # before anything is written: one line naming the extra
    if where.exists() and (not where.is_dir() or any(where.iterdir())):
        raise GateError(f"{where}: already exists and is not an empty directory (a previous demo?)",
                        hint="pass --out NEW_DIR, or delete it")
    repo = build_repo(where / "repo")
    reports = where / "reports"
    out.say(f"demo repository: {repo}")
    out.say("changes on branch 'feature': kernels/axpby.py (refactor, correct), kernels/rmsnorm.py (planted bug)\n")
    code = check(["check", "--repo", str(repo), "--base", "main", "--head", "feature", "--out", str(reports),
                 "--no-cache", *flags, *([] if gpu else ["--cpu"])])
    record = RunRecord.read(reports / "results.json")
    by_kernel = {k.path: [r for r in record.results if k.path in r.kernels and r.level == "required"]
                 for k in record.kernels}
    out.say("\n== demo verdicts per kernel ==")
    ok = code == ExitCode.POLICY_BREACHED
    for path, results in sorted(by_kernel.items()):
        red = any(r.status.value in ("failed", "error") for r in results)
        word = paint("RED  ", "red", out.colour()) if red else paint("GREEN", "green", out.colour())
        out.verdict(f"  {word}  {path}")
        ok &= red == (path == BUG[0])
    kept = [reports / name for name in FILENAMES.values() if (reports / name).is_file()]
    out.verdict(f"reports in {reports}: " + ", ".join(str(path) for path in kept))
    out.say(f"the example repository stays in {repo}: try `gpu-gate list-kernels --repo {repo} --base main`")
    if not ok:
        out.error("the demo did not come out as expected (rmsnorm red, axpby green): please report it")
    return int(ExitCode.PASSED if ok else ExitCode.INTERNAL_ERROR)
