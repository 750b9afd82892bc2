"""Equivalence engine speed.

1. Cases per second of the main case loop (``CaseRunner.run``: inputs, candidate twice,
   float64 reference, baseline, conditioning, every guard, the comparison; the input
   sensitivity probe on every 4th case, as the check does) for an RMSNorm spec at
   4096x4096 bf16. Target on an H100: at least 100 cases/s. Without a GPU it runs on the
   CPU at a smaller size and says so (the target does not apply there).
2. Wall time of the default case budget (the policy's defaults: 64 cases, the error-growth
   sweep) for a small RMSNorm spec on the CPU, in-process. Target: at most 60 s.

    python bench/bench_equivalence.py [--cases 50] [--size 4096] [--cpu-size 512]
"""
from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

SPEC = '''import torch
import gpu_gate as gg


def rmsnorm(x, w, eps=1e-6):
    xf = x.float()
    return (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps) * w.float()).to(x.dtype)


@gg.spec(dims={{"rows": gg.Dim(1, {rows}), "hidden": gg.Dim(1, {hidden}, reduction=True)}},
         inputs={{"x": gg.Tensor(("rows", "hidden"), dtypes={dtypes}), "w": gg.Tensor(("hidden",), dtype="like:x")}},
         reference=lambda x, w: x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6) * w)
def rmsnorm_gate(x, w):
    return rmsnorm(x, w)
'''


def _load(root: Path, rows: int, hidden: int, dtypes: list[str]) -> object:
    from gpu_gate.inprocess import Context
    from gpu_gate.worker.loader import load_spec
    from gpu_gate.protocol.jobs import Job, SpecRef

    (root / "bench_gate.py").write_text(SPEC.format(rows=rows, hidden=hidden, dtypes=dtypes))
    job = Job(id="b", check="equivalence", level="required", kernels=(), spec=SpecRef("bench_gate.py", "rmsnorm_gate"))
    return load_spec(job, Context(repo_root=root, device="cpu", workdir=root))


def cases_per_second(root: Path, device: str, n: int, cases: int) -> tuple[float, float]:
    import torch

    from gpu_gate.judge.checks.equivalence import torch_settings
    from gpu_gate.protocol.cases import Case, InputChoice
    from gpu_gate.judge.equivalence.compare import Rule
    from gpu_gate.judge.equivalence.engine import CaseRunner

    spec = _load(root, n, n, ["bfloat16"])
    runner = CaseRunner(spec, "bench_gate.py::rmsnorm_gate", device, Rule(), "gpu-gate repro x --case {token}")
    choice = InputChoice("bfloat16", "normal", "contiguous")
    fixed = [Case(f"c{i:04d}", 1000 + i, {"rows": n, "hidden": n}, {"x": choice, "w": choice}) for i in range(cases)]
    with torch_settings():
        for c in fixed[:2]:  # warm-up: allocator, kernels
            runner.run(c, sensitivity=True)
        if device == "cuda":
            torch.cuda.synchronize()
        start = time.perf_counter()
        failed = 0
        for i, c in enumerate(fixed):
            failed += runner.run(c, sensitivity=i % 4 == 0).failed
        if device == "cuda":
            torch.cuda.synchronize()
        elapsed = time.perf_counter() - start
    if failed:
        raise SystemExit(f"{failed} benchmark cases failed: the candidate should pass")
    return cases / elapsed, elapsed


def default_budget_seconds(root: Path) -> tuple[float, int, str]:
    from gpu_gate.inprocess import Context
    from gpu_gate.judge.job import run_job
    from gpu_gate.protocol.jobs import Job, SpecRef
    from gpu_gate.policy.models import EquivalencePolicy

    _load(root, 64, 1 << 18, ["float32", "float16", "bfloat16"])
    job = Job(id="b", check="equivalence", level="required", kernels=(), spec=SpecRef("bench_gate.py", "rmsnorm_gate"),
              options=EquivalencePolicy().options(), seed=1)
    start = time.perf_counter()
    r = run_job(job, Context(repo_root=root, device="cpu", workdir=root))
    return time.perf_counter() - start, r.cases, r.status.value


def main() -> int:
    import torch

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cases", type=int, default=50)
    ap.add_argument("--size", type=int, default=4096, help="rows = hidden on a GPU")
    ap.add_argument("--cpu-size", type=int, default=512, help="rows = hidden on the CPU")
    args = ap.parse_args()
    rows: list[tuple[str, str, str, str]] = []
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        if torch.cuda.is_available():
            rate, el = cases_per_second(root, "cuda", args.size, args.cases)
            name = torch.cuda.get_device_name()
            rows.append((f"cases/s, RMSNorm {args.size}x{args.size} bf16, {name}", f"{rate:.1f}", ">= 100 (H100)",
                         "ok" if rate >= 100 else "BELOW"))
        else:
            cases = max(4, args.cases // 5)
            rate, el = cases_per_second(root, "cpu", args.cpu_size, cases)
            rows.append((f"cases/s, RMSNorm {args.cpu_size}x{args.cpu_size} bf16, CPU (no GPU: smaller size)",
                         f"{rate:.1f}", "n/a (target is for an H100 at 4096x4096)", "-"))
        secs, ncases, status = default_budget_seconds(root)
        rows.append((f"CPU seconds, default budget ({ncases} cases + growth sweep), small RMSNorm spec",
                     f"{secs:.1f}", "<= 60", "ok" if secs <= 60 and status == "passed" else "BELOW"))
    width = max(len(r[0]) for r in rows)
    print(f"{'measure':<{width}}  {'value':>8}  {'target':<40} result")
    for what, value, target, ok in rows:
        print(f"{what:<{width}}  {value:>8}  {target:<40} {ok}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
