"""What one equivalence job costs on the CPU, in-process: wall seconds, CPU seconds (this process
and its children: on a shared machine the wall time measures the neighbours too), the cases run
and where the time went (the job's ``extra["timing"]`` phases). Run it on two trees to compare
them, e.g. before and after a change to the schedule:

    python bench/bench_job_cost.py                       # the default budget of a small RMSNorm spec
    python bench/bench_job_cost.py --spec DIR FILE::NAME --cases 24 [--interpret]
"""
from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

RMSNORM = '''import torch
import gpu_gate as gg


def rmsnorm(x, w, eps=1e-6):
    xf = x.float()
    return (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps) * w.float()).to(x.dtype)


@gg.spec(dims={"rows": gg.Dim(1, 64), "hidden": gg.Dim(1, 1 << 18, reduction=True)},
         inputs={"x": gg.Tensor(("rows", "hidden"), dtypes=["float32", "float16", "bfloat16"]),
                 "w": gg.Tensor(("hidden",), dtype="like:x")},
         reference=lambda x, w: x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6) * w)
def rmsnorm_gate(x, w):
    return rmsnorm(x, w)
'''

CHILD = '''
import json, resource, sys, time
from pathlib import Path
from gpu_gate.inprocess import Context
from gpu_gate.judge.job import run_job
from gpu_gate.protocol.jobs import Job, SpecRef
root, file, name, out = Path(sys.argv[1]), sys.argv[2], sys.argv[3], Path(sys.argv[4])
options = json.loads(sys.argv[5])
job = Job(id="bench", check="equivalence", level="required", kernels=(), spec=SpecRef(file, name), options=options,
          seed=int(sys.argv[6]))
start = time.perf_counter()
r = run_job(job, Context(repo_root=root, device="cpu", workdir=out.parent))
wall = time.perf_counter() - start
usage = [resource.getrusage(w) for w in (resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN)]
out.write_text(json.dumps({"wall_s": wall, "cpu_s": sum(u.ru_utime + u.ru_stime for u in usage), "cases": r.cases,
                           "status": r.status.value, "timing": r.extra.get("timing", {})}))
'''


def measure(root: Path, ref: str, options: dict[str, object], seed: int, interpret: bool) -> dict[str, object]:
    file, _, name = ref.partition("::")
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    if interpret:
        env["TRITON_INTERPRET"] = "1"
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "cost.json"
        p = subprocess.run([sys.executable, "-c", CHILD, str(root), file, name, str(out), json.dumps(options),
                            str(seed)], env=env, cwd=tmp, capture_output=True, text=True)
        if p.returncode != 0:
            raise SystemExit(p.stderr)
        return json.loads(out.read_text())  # type: ignore[no-any-return]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--spec", nargs=2, metavar=("ROOT", "FILE::NAME"), help="default: a small RMSNorm spec")
    ap.add_argument("--cases", type=int, default=None, help="default: the policy's (64)")
    ap.add_argument("--seeds", type=int, default=1)
    ap.add_argument("--interpret", action="store_true", help="TRITON_INTERPRET=1 (a Triton spec without a GPU)")
    ap.add_argument("--option", action="append", default=[], metavar="KEY=JSON", help="more job options")
    args = ap.parse_args()
    options: dict[str, object] = {"shrink": False}
    if args.cases:
        options["cases"] = args.cases
    for item in args.option:
        key, _, value = item.partition("=")
        options[key] = json.loads(value)
    with tempfile.TemporaryDirectory() as tmp:
        if args.spec:
            root, ref = Path(args.spec[0]).resolve(), args.spec[1]
        else:
            root, ref = Path(tmp), "bench_gate.py::rmsnorm_gate"
            (root / "bench_gate.py").write_text(RMSNORM)
        for seed in range(args.seeds):
            t = time.time()
            r = measure(root, ref, options, seed, args.interpret)
            timing = r["timing"] if isinstance(r["timing"], dict) else {}
            phases = {k: v for k, v in timing.items() if k.endswith("_s") and k[:-2] in (
                "read_sizes", "magnitude", "cases", "growth", "thresholds", "replay", "finish")}
            print(json.dumps({"spec": ref, "seed": seed, "status": r["status"], "cases": r["cases"],
                              "wall_s": round(float(r["wall_s"]), 1), "cpu_s": round(float(r["cpu_s"]), 1),
                              "phases": phases, "measured_at": round(t)}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
