"""Time a result-cache hit end to end: hash the job's files, then read the entry.

Builds a small repository (a CUDA kernel of realistic size, a header, a gate spec and
a helper module), stores a result for the job, and times ``cache_key`` + ``get``.
Target: a hit in at most 2 s (it should take milliseconds).

When the ``gpu-gate check`` command exists, it also builds the demo repository and
runs ``gpu-gate check --cpu`` twice on the unchanged kernels; the second run's wall
time is what a re-run of an unchanged pull request costs.

    python bench/bench_cache.py [--repeat 200] [--skip-cli]
"""
from __future__ import annotations

import argparse
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from gpu_gate.store.dependencies import cache_key  # noqa: E402
from gpu_gate.store.results import ResultCache  # noqa: E402
from gpu_gate.findings import Finding, JobResult, Status  # noqa: E402
from gpu_gate.protocol.jobs import Job, SpecRef  # noqa: E402

TARGET_S = 2.0
ENV = {"gpu": "NVIDIA H100 80GB HBM3", "driver": "580.159.04", "cuda": "13.0", "torch": "2.11.0+cu130",
       "triton": "3.6.0", "cupy": "14.2.0", "compute-sanitizer": "2025.3.1.0"}
DEPS = ["gate/softmax_gate.py", "mylib/__init__.py", "mylib/ops.py", "csrc/common.cuh"]


def build_repo(root: Path) -> Job:
    files = {
        # About 40 KB of kernel source: a large hand-written kernel file.
        "csrc/softmax.cu": '#include "common.cuh"\n' + "".join(
            f"__global__ void softmax_{i}(const float* x, float* y, int n) {{\n"
            f"  int t = blockIdx.x * blockDim.x + threadIdx.x;\n  if (t < n) y[t] = expf(x[t] - {i}.0f);\n}}\n"
            for i in range(400)),
        "csrc/common.cuh": "#pragma once\n#define WARP 32\n",
        "gate/softmax_gate.py": "import gpu_gate as gg\nfrom mylib.ops import softmax\n",
        "mylib/__init__.py": "",
        "mylib/ops.py": "def softmax(x):\n    return x\n",
    }
    for rel, text in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text)
    return Job(id="equivalence-softmax", check="equivalence", level="required", kernels=("csrc/softmax.cu",),
               spec=SpecRef("gate/softmax_gate.py", "softmax_gate"),
               options={"cases": 200, "dtypes": ["float32", "bfloat16", "float16"]})


def time_hits(repeat: int) -> tuple[list[float], float]:
    with tempfile.TemporaryDirectory(prefix="gpu-gate-bench-cache-") as tmp:
        root = Path(tmp) / "repo"
        job = build_repo(root)
        cache = ResultCache(Path(tmp) / "cache")
        result = JobResult(job_id=job.id, check=job.check, status=Status.FAILED, cases=200,
                           findings=[Finding(check="equivalence", kind="mismatch", message="Mismatched elements")])
        note = cache.put(cache_key(job, root, DEPS, "policy:1", ENV), result, "0123abc")
        assert note is None, note
        start = time.perf_counter()
        times = []
        for _ in range(repeat):
            t0 = time.perf_counter()
            hit = cache.get(cache_key(job, root, DEPS, "policy:1", ENV))
            times.append(time.perf_counter() - t0)
            assert hit is not None and hit.cached_from == "0123abc"
        return times, time.perf_counter() - start


def time_cli_twice() -> tuple[float, float, str] | str:
    if not (Path(__file__).resolve().parent.parent / "gpu_gate" / "cli.py").exists():
        return "skipped: gpu_gate/cli.py does not exist yet"
    from gpu_gate.commands.demo import build_repo as build_demo

    with tempfile.TemporaryDirectory(prefix="gpu-gate-bench-cli-") as tmp:
        repo = build_demo(Path(tmp) / "repo")
        argv = [sys.executable, "-m", "gpu_gate.cli", "check", "--repo", str(repo), "--base", "main",
                "--head", "feature", "--out", str(Path(tmp) / "out"), "--cpu"]
        walls, reused = [], "0"
        for _ in range(2):
            t0 = time.perf_counter()
            res = subprocess.run(argv, capture_output=True, text=True, env={**os.environ, "PYTHONUNBUFFERED": "1"})
            walls.append(time.perf_counter() - t0)
            if res.returncode not in (0, 1):
                return f"failed: gpu-gate check exited {res.returncode}: {res.stderr.strip().splitlines()[-1:]}"
            found = re.search(r"\((\d+) cached\)", res.stdout + res.stderr)
            reused = found.group(1) if found else "0"
        return walls[0], walls[1], reused


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=200)
    ap.add_argument("--skip-cli", action="store_true", help="do not time `gpu-gate check`")
    args = ap.parse_args()

    times, total = time_hits(args.repeat)
    med, worst = statistics.median(times), max(times)
    rows = [("cache hit (key over 5 files + get), median", f"{med * 1e3:.2f} ms"),
            ("cache hit, slowest", f"{worst * 1e3:.2f} ms"),
            (f"{args.repeat} hits in all", f"{total:.3f} s")]
    cli = "skipped: --skip-cli" if args.skip_cli else time_cli_twice()
    if isinstance(cli, tuple):
        rows += [("gpu-gate check --cpu, first run", f"{cli[0]:.2f} s"),
                 ("gpu-gate check --cpu, second run (unchanged)", f"{cli[1]:.2f} s"),
                 ("jobs reused from the cache on the second run", cli[2])]
    else:
        rows.append(("gpu-gate check twice", cli))
    width = max(len(r[0]) for r in rows)
    print(f"{'measure':<{width}}  value")
    print(f"{'-' * width}  {'-' * 12}")
    for name, value in rows:
        print(f"{name:<{width}}  {value}")
    ok = worst <= TARGET_S
    print(f"\ntarget: a hit in <= {TARGET_S:.0f} s: {'met' if ok else 'MISSED'}")
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
