"""Multi-GPU executor speed-up: the same 64-job plan on 1 GPU and on every visible GPU.

Builds a synthetic repository with 64 gate specs (each covering its own kernel file), each
of whose candidates keeps its GPU busy for a fixed time, then times `gpu-gate check` with
CUDA_VISIBLE_DEVICES set to one GPU and to all of them. Target on 4 GPUs: >= 3.4x faster.

    python bench/bench_multigpu.py [--jobs 64] [--busy-ms 600] [--runs one,all]

Each job is a fresh interpreter that imports torch, as in a real run: about 3.7 s per job with
--busy-ms 200 on an H200 (the first job of a run, or the doctor before it, also compiles the
bytecode where torch was installed without it). Both runs of the default plan take about six
minutes on 1 + 4 GPUs; where they must be split over two sessions, pass the first one's wall
time to the second with --runs all --one-gpu-s W, at the same --busy-ms.
Not a test. Without a GPU it says so and exits 0.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

SPEC = '''\
import time
import torch
import gpu_gate as gg

_A = None

def _busy(ms):
    global _A
    if _A is None:
        _A = torch.randn(2048, 2048, device="cuda")
    torch.cuda.synchronize()
    end = time.perf_counter() + ms / 1000
    while time.perf_counter() < end:
        for _ in range(8):
            _A @ _A
        torch.cuda.synchronize()

@gg.spec(dims={{"n": gg.Dim(1, 4096)}}, inputs={{"x": gg.Tensor(("n",))}}, reference=lambda x: x * 2,
         covers=["csrc/k{i:03d}.cu"], devices=("cuda",))
def spec_{i:03d}(x):
    _busy({per_case_ms})
    return x * 2
'''

POLICY = """\
version: 1
kernels: {{include: ["csrc/**/*.cu"]}}
specs: ["gate/**/*_gate.py"]
checks:
  compile: off
  determinism: off
  memcheck: off
  racecheck: off
  synccheck: off
  initcheck: off
  equivalence: {{cases: {cases}, growth: false, shrink: false}}
cache: {{enabled: false}}
"""


def git(repo: Path, *args: str) -> None:
    env = {**os.environ, "GIT_AUTHOR_NAME": "b", "GIT_AUTHOR_EMAIL": "b@x", "GIT_COMMITTER_NAME": "b",
           "GIT_COMMITTER_EMAIL": "b@x"}
    subprocess.run(["git", "-c", "init.defaultBranch=main", *args], cwd=repo, env=env, check=True,
                   capture_output=True)


def build(root: Path, jobs: int, busy_ms: int, cases: int) -> Path:
    repo = root / "repo"
    repo.mkdir()
    (repo / ".gpu-gate.yml").write_text(POLICY.format(cases=cases))
    git(repo, "init", "-q")
    git(repo, "add", "-A")
    git(repo, "commit", "-qm", "base")
    git(repo, "checkout", "-qb", "feature")
    for i in range(jobs):
        (repo / "csrc").mkdir(exist_ok=True)
        (repo / "gate").mkdir(exist_ok=True)
        (repo / f"csrc/k{i:03d}.cu").write_text(f"__global__ void k{i}(float* x) {{ x[0] = {i}.0f; }}\n")
        (repo / f"gate/k{i:03d}_gate.py").write_text(SPEC.format(i=i, per_case_ms=busy_ms // cases))
    git(repo, "add", "-A")
    git(repo, "commit", "-qm", "kernels")
    return repo


def run(repo: Path, gpus: str) -> tuple[float, int, str, list[float]]:
    """Wall time, exit code, the verdict line, and every job's own duration."""
    env = {**os.environ, "CUDA_VISIBLE_DEVICES": gpus}
    out = repo / f"out-{gpus.count(',') + 1}"
    start = time.perf_counter()
    p = subprocess.run([sys.executable, "-m", "gpu_gate.cli", "check", "--base", "main", "--out", str(out)],
                       cwd=repo, env=env, capture_output=True, text=True)
    wall = time.perf_counter() - start
    durations: list[float] = []
    if (out / "results.json").exists():
        durations = [float(r.get("duration_s", 0.0)) for r in json.loads((out / "results.json").read_text())["results"]]
    verdict = next((ln for ln in reversed(p.stdout.splitlines()) if "verdict" in ln.lower()), "")
    return wall, p.returncode, verdict or (p.stdout + p.stderr).strip()[-300:], durations


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--jobs", type=int, default=64)
    ap.add_argument("--busy-ms", type=int, default=600, help="GPU-busy ms per job pass: each candidate call keeps the GPU busy for busy-ms / cases")
    ap.add_argument("--cases", type=int, default=3)
    ap.add_argument("--runs", default="one,all", help="which runs: one (1 GPU), all (every GPU), or both")
    ap.add_argument("--one-gpu-s", type=float,
                    help="wall time of an earlier 1-GPU run of the same plan, when the runs are split over two calls")
    args = ap.parse_args()
    try:
        import torch
    except ImportError:
        print("torch is not installed: nothing to measure")
        return 0
    n = torch.cuda.device_count()
    if n == 0:
        print("no GPU on this machine: the multi-GPU benchmark needs one or more NVIDIA GPUs")
        return 0
    runs = args.runs.split(",")
    root = Path(tempfile.mkdtemp(prefix="bench-multigpu-"))
    times: dict[int, float] = {}
    print(f"{'GPUs':>5} {'jobs':>5} {'wall s':>8} {'job s (median)':>15} {'sum of jobs s':>14} {'exit':>5}")
    try:
        repo = build(root, args.jobs, args.busy_ms, args.cases)
        for which in runs:
            gpus = "0" if which == "one" else ",".join(str(i) for i in range(n))
            wall, rc, tail, durations = run(repo, gpus)
            times[gpus.count(",") + 1] = wall
            median = statistics.median(durations) if durations else float("nan")
            print(f"{gpus.count(',') + 1:>5} {len(durations):>5} {wall:>8.1f} {median:>15.2f} {sum(durations):>14.1f} "
                  f"{rc:>5}   {tail}", flush=True)
    finally:
        shutil.rmtree(root, ignore_errors=True)
    if args.one_gpu_s and 1 not in times:
        times[1] = args.one_gpu_s
    if 1 in times and n in times and n > 1:
        print(f"speed-up on {n} GPUs: {times[1] / times[n]:.2f}x (target on 4 GPUs: >= 3.4x)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
