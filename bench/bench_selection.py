"""Selection on a real kernel library: `plan` time with and without recorded launches, and
what `list-kernels` says, on commits of a Liger-Kernel checkout (fetched code stays out of this
repository: pass its path).

    python bench/bench_selection.py --liger PATH [--commits SHA ...] [--cache-dir DIR] [--record]

For each commit C it makes a scratch clone, commits gate specs (written here, as a careful user
of Liger would) on top of C's parent (S), and replays C on top (H). It then times
`plan --base S --head H` with coverage from imports alone (--no-cache) and with the launches
recorded in --cache-dir, and prints `list-kernels`. With --record (needs a GPU and Liger's
dependencies), it first runs `check --base S^ --head S` once per commit, which records what
each spec launches, keyed by S's content: the launches a later pull request's plan reads.
"""
from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

POLICY = """\
version: 1
kernels: {exclude: ["src/liger_kernel/ops/backends/_ascend/**", "test/**", "benchmark/**"]}
specs: ["gate/**/*_gate.py"]
checks:
  compile: off
  memcheck: off
  racecheck: off
  synccheck: off
  initcheck: off
  determinism: off
  equivalence: {cases: 16, growth: false, shrink: false}
"""

RMS_NORM = """\
import torch
import gpu_gate as gg
from liger_kernel.ops.rms_norm import LigerRMSNormFunction


@gg.spec(
    dims={"rows": gg.Dim(1, 2048), "hidden": gg.Dim(1, 8192, reduction=True)},
    inputs={"x": gg.Tensor(("rows", "hidden"), dtypes=["float32", "bfloat16"]),
            "w": gg.Tensor(("hidden",), dtype="like:x")},
    reference=lambda x, w: x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6) * w,
)
def rms_norm_gate(x, w):
    return LigerRMSNormFunction.apply(x, w, 1e-6, 0.0, "llama", False)
"""

GEGLU = """\
import torch
import gpu_gate as gg
from liger_kernel.ops import LigerGELUMulFunction


@gg.spec(
    dims={"rows": gg.Dim(1, 2048), "hidden": gg.Dim(1, 11008)},
    inputs={"a": gg.Tensor(("rows", "hidden"), dtypes=["float32", "bfloat16"]),
            "b": gg.Tensor(("rows", "hidden"), dtype="like:a")},
    reference=lambda a, b: torch.nn.functional.gelu(a, approximate="tanh") * b,
)
def geglu_gate(a, b):
    return LigerGELUMulFunction.apply(a, b)
"""

COMMITS = ["c5bda07f", "7c454f48", "e804c0d2"]  # cross-entropy (Triton), cuTile + CuTe DSL RMSNorm, fused MoE
ENV = {"GIT_AUTHOR_NAME": "bench", "GIT_AUTHOR_EMAIL": "bench@example.invalid", "GIT_COMMITTER_NAME": "bench",
       "GIT_COMMITTER_EMAIL": "bench@example.invalid"}


def git(repo: Path, *args: str) -> str:
    r = subprocess.run(["git", "-c", "commit.gpgsign=false", *args], cwd=repo, capture_output=True, text=True,
                       env={**os.environ, **ENV})
    if r.returncode:
        raise SystemExit(f"git {' '.join(args)}: {r.stderr.strip()}")
    return r.stdout.strip()


def gate(repo: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "gpu_gate.cli", *args], cwd=repo, capture_output=True, text=True)


def scratch(liger: Path, commit: str, where: Path) -> tuple[Path, str, str]:
    """S = C's parent plus the specs, H = C plus the specs; built with git's plumbing (no work
    tree), leaving out large test resources that a partial clone may lack."""
    repo = where / f"liger-{commit[:8]}"
    git(where, "clone", "-q", "--no-checkout", str(liger), str(repo))
    blobs = {}
    for rel, text in {".gpu-gate.yml": POLICY, "gate/rms_norm_gate.py": RMS_NORM, "gate/geglu_gate.py": GEGLU}.items():
        tmp = where / "blob"
        tmp.write_text(text)
        blobs[rel] = git(repo, "hash-object", "-w", str(tmp))

    def tree(rev: str) -> str:
        env = {"GIT_INDEX_FILE": str(where / "index")}
        run = lambda *a: subprocess.run(["git", *a], cwd=repo, env={**os.environ, **env}, check=True,  # noqa: E731
                                        capture_output=True, text=True).stdout.strip()
        run("read-tree", rev)
        run("rm", "--cached", "-r", "-q", "--ignore-unmatch", "test/resources")
        for rel, oid in blobs.items():
            run("update-index", "--add", "--cacheinfo", f"100644,{oid},{rel}")
        return run("write-tree")

    parent = git(repo, "rev-parse", f"{commit}^")
    base = git(repo, "commit-tree", tree(parent), "-p", parent, "-m", "gate specs")
    head = git(repo, "commit-tree", tree(commit), "-p", base, "-m", git(repo, "log", "-1", "--format=%B", commit))
    git(repo, "update-ref", "refs/heads/gate-setup", base)
    git(repo, "update-ref", "refs/heads/change", head)
    git(repo, "symbolic-ref", "HEAD", "refs/heads/gate-setup")
    git(repo, "read-tree", "--reset", "-u", "HEAD")
    return repo, base, head


def time_plan(repo: Path, base: str, head: str, extra: list[str], repeats: int) -> tuple[float, str]:
    times = []
    out = ""
    for _ in range(repeats):
        t = time.perf_counter()
        p = gate(repo, "plan", "--base", base, "--head", head, *extra)
        times.append(time.perf_counter() - t)
        if p.returncode:
            raise SystemExit(p.stderr)
        out = p.stdout
    return statistics.median(times), out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--liger", type=Path, required=True, help="a Liger-Kernel clone (work tree or bare)")
    ap.add_argument("--commits", nargs="*", default=COMMITS)
    ap.add_argument("--cache-dir", type=Path, help="recorded launches (default: a fresh directory)")
    ap.add_argument("--record", action="store_true", help="first run the specs at the base to record launches")
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args()
    where = Path(tempfile.mkdtemp(prefix="bench-selection-"))
    cache = (args.cache_dir or where / "cache").resolve()
    rows = []
    try:
        for commit in args.commits:
            repo, base, head = scratch(args.liger.resolve(), commit, where)
            if args.record:
                p = gate(repo, "check", "--base", f"{base}^", "--head", base, "--cache-dir", str(cache),
                         "--out", str(where / f"out-{commit[:8]}"))
                print(f"== record at {commit[:8]}^ + specs: exit {p.returncode}\n{p.stdout[-3000:]}", flush=True)
            static, _ = time_plan(repo, base, head, ["--no-cache"], args.repeats)
            observed, _ = time_plan(repo, base, head, ["--cache-dir", str(cache)], args.repeats)
            lk = gate(repo, "list-kernels", "--base", base, "--head", head, "--cache-dir", str(cache))
            print(f"== list-kernels for {commit[:8]} ({git(repo, 'log', '-1', '--format=%s', head)[:70]})\n{lk.stdout}"
                  f"{lk.stderr}", flush=True)
            files = len(git(repo, "ls-tree", "-r", "--name-only", head).splitlines())
            rows.append((commit[:8], files, static, observed))
    finally:
        shutil.rmtree(where, ignore_errors=True)
    print(f"{'commit':10} {'files':>6} {'plan, imports only':>20} {'plan, with launches':>20}")
    for c, files, static, observed in rows:
        print(f"{c:10} {files:>6} {static:>19.2f}s {observed:>19.2f}s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
