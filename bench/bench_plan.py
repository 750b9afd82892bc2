"""Time change detection, spec discovery and coverage on a large synthetic repository.

Builds a repository of 20,000 files (CUDA sources and headers, Python modules with
and without Triton kernels, gate specs, plain files), then a branch that changes
2,000 of them, and times each stage and, where available, the whole
``gpu-gate plan`` command. Target: ``gpu-gate plan`` in at most 3 s.

    python bench/bench_plan.py [--files 20000] [--changed 2000] [--keep DIR]
"""
from __future__ import annotations

import argparse
import importlib.util
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from types import SimpleNamespace
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from gpu_gate import changes, discovery  # noqa: E402

TARGET_S = 3.0
ENV = {
    "GIT_AUTHOR_NAME": "Bench", "GIT_AUTHOR_EMAIL": "bench@example.com", "GIT_AUTHOR_DATE": "2024-01-01T00:00:00Z",
    "GIT_COMMITTER_NAME": "Bench", "GIT_COMMITTER_EMAIL": "bench@example.com",
    "GIT_COMMITTER_DATE": "2024-01-01T00:00:00Z", "GIT_CONFIG_NOSYSTEM": "1",
}
POLICY = SimpleNamespace(
    kernels=SimpleNamespace(include=("csrc/**/*.cu", "csrc/**/*.cuh", "mylib/**/*.py"), exclude=("third_party/**",)),
    specs=("gate/**/*_gate.py",),
    cuda=SimpleNamespace(include_dirs=("csrc/include",)),
)
TRITON = "import triton\nimport triton.language as tl\nfrom mylib.p{pkg} import m{dep}\n\n@triton.jit\ndef k{i}(x_ptr, n, B: tl.constexpr):\n    pid = tl.program_id(0)\n"
PLAIN = "from mylib.p{pkg} import m{dep}\n\ndef f{i}(x):\n    return x + {i}\n"


def git(repo: Path, *args: str) -> None:
    subprocess.run(["git", *args], cwd=repo, env={**os.environ, **ENV}, check=True, capture_output=True)


def file_for(i: int, version: int) -> tuple[str, str]:
    """The i-th file of the synthetic repository, in a given version."""
    kind = i % 10
    d = i % 97
    tag = f"// v{version}\n"
    if kind in (0, 1):
        return f"csrc/d{d}/k{i}.cu", f'#include "common.cuh"\n#include <h{i % 50}.cuh>\n{tag}__global__ void k{i}() {{}}\n'
    if kind == 2:
        return f"csrc/include/h{i % 50}.cuh" if i < 500 else f"csrc/d{d}/x{i}.cuh", f'#include "../d0/common.cuh"\n{tag}'
    if kind in (3, 4):
        return f"mylib/p{d}/m{i}.py", TRITON.format(i=i, **_dep(i)) + f"# v{version}\n"
    if kind in (5, 6):
        return f"mylib/p{d}/m{i}.py", PLAIN.format(i=i, **_dep(i)) + f"# v{version}\n"
    if kind == 7 and i % 100 == 7:
        return f"gate/g{i}_gate.py", f"import gpu_gate as gg\nfrom mylib.p{(i - 4) % 97} import m{i - 4}\n\n@gg.spec()\ndef g{i}():\n    pass\n"
    return f"docs/d{d}/f{i}.md", f"text {i} v{version}\n"


def _dep(i: int) -> dict[str, int]:
    # Each module imports the one ten below it: import chains hundreds of modules deep.
    dep = i - 10 if i >= 10 else i
    return {"dep": dep, "pkg": dep % 97}


def build(root: Path, n_files: int, n_changed: int) -> Path:
    repo = root / "repo"
    repo.mkdir(parents=True)
    git(repo, "init", "-q", "-b", "main")
    paths: list[str] = []
    for i in range(n_files):
        path, text = file_for(i, 0)
        _write(repo / path, text)
        paths.append(path)
    for d in range(97):
        _write(repo / f"csrc/d{d}/common.cuh", "#pragma once\n")
        for pkg in ("mylib", f"mylib/p{d}"):
            _write(repo / pkg / "__init__.py", "")
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "base")
    git(repo, "checkout", "-q", "-b", "feature")
    step = max(1, n_files // n_changed)
    for j in range(n_changed):
        i = j * step + j % step  # walks through every kind of file
        path, text = file_for(i, 1)
        _write(repo / path, text)
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "change")
    return repo


def _write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


def timed(fn: Callable[[], Any]) -> tuple[Any, float]:
    start = time.perf_counter()
    value = fn()
    return value, time.perf_counter() - start


def plan_command(repo: Path) -> tuple[str, float | None]:
    if importlib.util.find_spec("gpu_gate.plan") is None or importlib.util.find_spec("gpu_gate.cli") is None:
        return "not available (no gpu_gate.plan / gpu_gate.cli)", None
    try:
        start = time.perf_counter()
        res = subprocess.run([sys.executable, "-m", "gpu_gate.cli", "plan", "--base", "main", "--head", "HEAD"],
                             cwd=repo, capture_output=True, text=True, timeout=120)
        elapsed = time.perf_counter() - start
    except (OSError, subprocess.SubprocessError) as exc:
        return f"failed to run: {exc}", None
    if res.returncode not in (0, 1):
        return f"exit {res.returncode}: {res.stderr.strip().splitlines()[-1:]}", elapsed
    return f"exit {res.returncode}", elapsed


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--files", type=int, default=20_000)
    ap.add_argument("--changed", type=int, default=2_000)
    ap.add_argument("--keep", type=Path, help="build the repository here and keep it")
    args = ap.parse_args()
    root = args.keep or Path(tempfile.mkdtemp(prefix="gpu-gate-bench-"))
    try:
        repo, build_s = timed(lambda: build(root, args.files, args.changed))
        cs, t_detect = timed(lambda: changes.detect(repo, "main", "HEAD", POLICY))
        specs, t_disc = timed(lambda: discovery.discover_specs(repo, "HEAD", POLICY, graph=cs.import_graph))
        cov, t_cov = timed(lambda: discovery.coverage(cs, specs))
        plan_note, t_plan = plan_command(repo)
        rows = [
            ("build repository (not timed against target)", build_s, ""),
            ("changes.detect", t_detect, f"{len(cs.files)} files, {len(cs.kernels)} kernels, "
                                         f"{len(cs.affected_specs)} affected specs, {len(cs.parse_errors)} parse errors"),
            ("discovery.discover_specs", t_disc, f"{len(specs)} specs"),
            ("discovery.coverage", t_cov, f"{sum(1 for v in cov.values() if not v)} uncovered"),
            ("detect + discover + coverage", t_detect + t_disc + t_cov, f"target <= {TARGET_S:.1f} s"),
            ("gpu-gate plan (subprocess)", t_plan, plan_note),
        ]
        print(f"{'stage':<46} {'seconds':>8}  notes")
        for name, secs, note in rows:
            print(f"{name:<46} {'-' if secs is None else f'{secs:8.2f}':>8}  {note}")
        worst = t_plan if t_plan is not None else t_detect + t_disc + t_cov
        return 0 if worst <= TARGET_S else 1
    finally:
        if args.keep is None:
            shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    raise SystemExit(main())
