"""Statuses that say what was checked (issue 40, part 7), on a real repository with the policy
`gpu-gate init` writes: a local `check --cpu` of a correct change is green, and names the GPU-only
checks it could not run here; the same run in CI (`CI=true`) fails closed on them."""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from conftest_git import GitRepo
from test_init import TRITON, fill_in, triton_repo


def _gate(*args: str, cwd: Path, ci: bool) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k not in ("CI", "GITHUB_ACTIONS", "GITHUB_EVENT_PATH")}
    if ci:
        env["CI"] = "true"
    return subprocess.run([sys.executable, "-m", "gpu_gate", *args], cwd=cwd, capture_output=True, text=True,
                          env=env, timeout=900)


def changed(make_repo, kernel: str) -> GitRepo:  # type: ignore[no-untyped-def]
    """The repository as `gpu-gate init` and a user leave it, and a pull request that makes the kernel
    ``kernel``."""
    r = triton_repo(make_repo)
    assert _gate("init", cwd=r.path, ci=False).returncode == 0
    fill_in(r)
    r.commit("gpu-gate init, and the spec filled in")
    r.branch("feature")
    r.commit("the kernel changed", {"src/mylib/ops/scale.py": kernel})
    return r


def _correct_change(make_repo) -> GitRepo:  # type: ignore[no-untyped-def]
    return changed(make_repo, TRITON.replace("128", "256"))  # faster, the same values


def test_a_local_cpu_run_of_a_correct_change_is_green_and_names_what_did_not_run(make_repo) -> None:  # type: ignore[no-untyped-def]
    r = _correct_change(make_repo)
    p = _gate("check", "--base", "main", "--cpu", "--no-cache", cwd=r.path, ci=False)
    text = p.stdout + p.stderr
    assert p.returncode == 0, text
    assert "PASS    equivalence gate/scale_gate.py::" in p.stdout, text
    headline = next(line for line in p.stdout.splitlines() if line.startswith("gpu-gate: PASSED"))
    assert "GPU-only, not run here" in headline and "equivalence cases run" in headline, headline
    not_run = [line for line in p.stdout.splitlines() if line.startswith("  - ") and "no GPU on this machine" in line]
    # "  - memcheck, racecheck for gate/... (2 jobs): not run: no GPU on this machine..." (one line per reason)
    named = {c for line in not_run for c in line[4:].split(" for ")[0].split(", ")}
    assert {"memcheck", "racecheck", "synccheck"} <= named, text
    assert all("GPU-only, not run here" in line and "does not block" in line for line in not_run), text
    # the compile check compiled nothing (no constexpr values): not run, never passed
    assert "NOT RUN compile src/mylib/ops/scale.py  0 of 1 Triton kernel(s) compiled" in p.stdout, text
    report = (r.path / ".gpu-gate" / "out" / "report.md").read_text()
    assert "GPU-only, not run here" in report.splitlines()[0]


def test_the_same_run_in_ci_fails_closed(make_repo) -> None:  # type: ignore[no-untyped-def]
    r = _correct_change(make_repo)
    p = _gate("check", "--base", "main", "--cpu", "--no-cache", cwd=r.path, ci=True)
    text = p.stdout + p.stderr
    assert p.returncode == 1, text
    assert "PASS    equivalence gate/scale_gate.py::" in p.stdout, text
    blocking = [line for line in p.stdout.splitlines() if "(blocks the merge)" in line]
    assert blocking and all("no GPU on this machine" in line for line in blocking), text


def _spec_written(make_repo) -> GitRepo:  # type: ignore[no-untyped-def]
    """A new user's first step: `gpu-gate init`, the spec filled in, nothing committed yet."""
    r = triton_repo(make_repo)
    init = _gate("init", cwd=r.path, ci=False)
    assert init.returncode == 0, init.stdout + init.stderr
    fill_in(r)
    return r


def test_the_command_init_suggests_runs_the_new_spec_locally(make_repo) -> None:  # type: ignore[no-untyped-def]
    """`gpu-gate check --cpu --spec gate/<kernel>_gate.py`, as init prints it, with no base: the spec runs on
    the work tree by absolute rules (before: "no base to compare against"). Its rules change (a new spec
    judging a kernel the base had) is listed, not blocking: there is no pull request to approve it on."""
    r = _spec_written(make_repo)
    p = _gate("check", "--cpu", "--no-cache", "--spec", "gate/scale_gate.py", cwd=r.path, ci=False)
    text = p.stdout + p.stderr
    assert p.returncode == 0, text
    assert "no --base given" in text and "PASS    equivalence gate/scale_gate.py::" in p.stdout, text
    warned = [line for line in p.stdout.splitlines() if "rules weakened by this change" in line]
    assert warned and all("a local run, not blocking here (in CI it blocks until a maintainer approves it" in line
                          for line in warned), text
    assert "Blocking:" not in p.stdout, text


def test_the_rules_change_still_blocks_in_ci(make_repo) -> None:  # type: ignore[no-untyped-def]
    r = _spec_written(make_repo)
    p = _gate("check", "--cpu", "--no-cache", "--spec", "gate/scale_gate.py", cwd=r.path, ci=True)
    text = p.stdout + p.stderr
    assert p.returncode == 1, text
    blocking = p.stdout.split("Blocking:", 1)[1] if "Blocking:" in p.stdout else ""
    assert "rules-weakened" in blocking and "a local run" not in blocking, text
