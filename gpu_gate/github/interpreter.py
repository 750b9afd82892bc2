"""Prove the interpreter the action runs with can run the checks: ``python -m gpu_gate.github.interpreter``.

On a GPU runner the checks need the runner's CUDA build of torch and the repository's own package in
the same interpreter as gpu-gate. Say what is missing before any job runs, in one line each, instead
of letting every spec fail with ``No module named 'torch'``.
"""
from __future__ import annotations

import argparse
import sys


def probe(require_gpu: bool) -> tuple[list[str], list[str]]:
    """(facts, problems) about this interpreter."""
    facts = [f"python {sys.version.split()[0]} at {sys.executable}"]
    problems: list[str] = []
    try:
        import torch
    except Exception as exc:  # noqa: BLE001 - any import failure means the same to the user
        problems.append(f"{sys.executable} cannot import torch ({type(exc).__name__}: {exc}). Install the runner's "
                        "CUDA build of torch into it, or pass the action's `python:` input an interpreter that has it")
        return facts, problems
    facts.append(f"torch {torch.__version__} (CUDA {torch.version.cuda or 'none'})")
    try:
        available = bool(torch.cuda.is_available())
        count = torch.cuda.device_count() if available else 0
    except Exception as exc:  # noqa: BLE001 - a broken driver raises all sorts of things
        available, count = False, 0
        facts.append(f"torch.cuda raised {type(exc).__name__}: {exc}")
    facts.append(f"torch.cuda.is_available() = {available}, {count} GPU(s)")
    if require_gpu and not available:
        why = ("this torch is a CPU-only build" if not torch.version.cuda
               else "no GPU is visible (driver, CUDA_VISIBLE_DEVICES, or the container's --gpus)")
        problems.append(f"torch.cuda.is_available() is False in {sys.executable}: {why}. Use the runner's CUDA "
                        "torch, or set the action's `gpu: false` input to run only what runs on the CPU")
    return facts, problems


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m gpu_gate.github.interpreter")
    p.add_argument("--require-gpu", action="store_true", help="fail unless torch.cuda.is_available()")
    args = p.parse_args(argv)
    facts, problems = probe(args.require_gpu)
    for fact in facts:
        print(fact, flush=True)
    for problem in problems:
        print(f"::error title=gpu-gate::{problem}", flush=True)
    return 2 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
