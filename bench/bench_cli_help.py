"""`gpu-gate --help` wall time (target: at most 0.3 s; it must never import torch).

    python bench/bench_cli_help.py [--runs 10]
"""
from __future__ import annotations

import argparse
import shutil
import statistics
import subprocess
import sys
import time


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=10)
    args = ap.parse_args()
    exe = shutil.which("gpu-gate")
    argv = [exe, "--help"] if exe else [sys.executable, "-m", "gpu_gate.cli", "--help"]
    times = []
    for _ in range(args.runs):
        t = time.perf_counter()
        subprocess.run(argv, capture_output=True, check=True)
        times.append(time.perf_counter() - t)
    print(f"{'command':<24} {'median s':>9} {'max s':>7}")
    print(f"{'gpu-gate --help':<24} {statistics.median(times):>9.3f} {max(times):>7.3f}   (target <= 0.3)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
