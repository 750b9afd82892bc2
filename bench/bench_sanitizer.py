"""Wall time of a spec-like workload, plain and under each compute-sanitizer tool.

usage: python bench/bench_sanitizer.py [--repeat N]

The workload (tests/gpu/kernels/run_case.py workload) runs a few cases of a small
CUDA kernel (through gpu_gate.cuda.load) and a Triton kernel. Target: the four
tools together, run concurrently on one GPU, take at most 4x the plain run.
Needs a GPU and compute-sanitizer; without them it says so and exits 0.
"""
from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from gpu_gate import proc  # noqa: E402
from gpu_gate.judge.checks.sanitizer import has_gpu  # noqa: E402
from gpu_gate.cuda import sanitizer as cs  # noqa: E402

CASE = [sys.executable, str(REPO / "tests" / "gpu" / "kernels" / "run_case.py"), "workload"]
KERNELS = ("tail_ok", "smem_ok", "copy_masked")
TARGET = 4.0


def _env(tool: str | None) -> dict[str, str]:
    env = proc.scrubbed_env(extra={"PYTHONPATH": str(REPO), "GPU_GATE_REPO_ROOT": str(REPO)})
    if tool:
        env.update(cs.sanitizer_env(tool))
    return env


def run_plain() -> proc.ProcResult:
    return proc.run([*CASE, "--pool"], cwd=REPO, env=_env(None), timeout=600)


def run_tool(sanitizer: str, tool: str, workdir: Path) -> proc.ProcResult:
    opts = cs.Options(tool, str(workdir / f"{tool}.xml"), KERNELS, launch_timeout=120)
    return proc.run(cs.argv(sanitizer, opts, CASE), cwd=REPO, env=_env(tool), timeout=600)


def _check(name: str, res: proc.ProcResult) -> None:
    if res.returncode != 0:
        raise SystemExit(f"{name} failed: {res.describe()}\n{res.tail(20)}\n{res.tail(20, 'stdout')}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=1)
    args = parser.parse_args()
    if not has_gpu():
        print("bench_sanitizer: no GPU here; compute-sanitizer needs a CUDA device. Nothing measured.")
        return 0
    found = cs.locate(os.environ.get("GPU_GATE_SANITIZER_PATH"))
    if found is None:
        print("bench_sanitizer: compute-sanitizer not found. Nothing measured.")
        return 0
    workdir = Path(tempfile.mkdtemp(prefix="gpu-gate-bench-"))
    _check("warm-up", run_plain())  # Triton's and NVRTC's caches are warm for every timed run
    rows: list[tuple[str, float]] = []
    for _ in range(args.repeat):
        plain = run_plain()
        _check("plain", plain)
        rows.append(("plain", plain.duration_s))
        for tool in cs.TOOLS:
            res = run_tool(found.path, tool, workdir)
            _check(tool, res)
            rows.append((tool, res.duration_s))
        start = time.monotonic()
        with ThreadPoolExecutor(len(cs.TOOLS)) as pool:
            results = list(pool.map(lambda t: run_tool(found.path, t, workdir / t), _mkdirs(workdir)))
        for tool, res in zip(cs.TOOLS, results):
            _check(f"{tool} (concurrent)", res)
        rows.append(("all four, concurrent", time.monotonic() - start))
    _print(rows, found)
    return 0


def _mkdirs(workdir: Path) -> list[str]:
    for tool in cs.TOOLS:
        (workdir / tool).mkdir(exist_ok=True)
    return list(cs.TOOLS)


def _print(rows: list[tuple[str, float]], found: cs.Sanitizer) -> None:
    best: dict[str, float] = {}
    for name, seconds in rows:
        best[name] = min(seconds, best.get(name, seconds))
    plain = best["plain"]
    sequential = sum(best[t] for t in cs.TOOLS)
    print(f"compute-sanitizer {found.version} at {found.path}")
    print(f"{'run':<24}{'wall s':>10}{'x plain':>10}")
    for name, seconds in best.items():
        print(f"{name:<24}{seconds:>10.2f}{seconds / plain:>10.2f}")
    print(f"{'all four, one by one':<24}{sequential:>10.2f}{sequential / plain:>10.2f}")
    ratio = best["all four, concurrent"] / plain
    verdict = "within" if ratio <= TARGET else "ABOVE"
    print(f"all four tools concurrently: {ratio:.2f}x the plain run ({verdict} the {TARGET:.0f}x target)")


if __name__ == "__main__":
    sys.exit(main())
