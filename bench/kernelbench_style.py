"""What a KernelBench-style check says of a gate spec: the baseline gpu-gate is measured against.

    python bench/kernelbench_style.py REPO gate/SPEC_FILE.py [--name SPEC] [--device cuda|cpu]

The check KernelBench and most kernel leaderboards run: one fixed problem size, inputs from
``torch.randn`` (float32, contiguous; indices uniform in their range), the forward pass only, a few
seeds, and ``torch.allclose(out, ref, atol=1e-2, rtol=1e-2)`` against the reference run on the same
inputs. Nothing of gpu-gate's own harness takes part (no dtype sweep, no layouts, no size menu, no
coupled labels, no float64 truth, no gradients, no sanitizer): the spec supplies only the kernel's
call, the reference and the names and ranges of the dims. Each dim takes 1024, within its range
(rounded to its ``multiple_of``; a dim with a list of values takes the middle one); while an input
would hold more than 2^24 elements the largest dim is halved, down to its lower bound.

Prints one JSON line: ``{"passed": ..., "trials": [...], "dims": {...}}``, or ``"error"`` where the
call or the reference raised (KernelBench counts that as a failure to run, not a catch).
"""
from __future__ import annotations

import argparse
import json
import math
import sys
import tempfile
from pathlib import Path
from typing import Any

SIZE = 1024
MAX_ELEMENTS = 1 << 24
SEEDS = (0, 1, 2, 3, 4)
ATOL = RTOL = 1e-2


def dims_for(spec: Any) -> dict[str, int]:
    from gpu_gate.spec import Index

    dims: dict[str, int] = {}
    for name, d in spec.dims.items():
        if d.values:
            dims[name] = sorted(d.values)[len(d.values) // 2]
        else:
            size = min(max(SIZE, d.lo), d.hi)
            dims[name] = max(d.lo, size - size % max(1, d.multiple_of))

    def numel(shape: Any) -> int:
        return math.prod(dims[s] if isinstance(s, str) else int(s) for s in shape)

    stuck: set[str] = set()
    while True:
        biggest = max((numel(i.shape) for i in spec.inputs.values()), default=0)
        shrinkable = [n for n, d in spec.dims.items() if not d.values and n not in stuck and dims[n] // 2 >= d.lo]
        if biggest <= MAX_ELEMENTS or not shrinkable:
            return dims
        name = max(shrinkable, key=lambda n: dims[n])
        step = max(1, spec.dims[name].multiple_of)
        smaller = max(spec.dims[name].lo, (dims[name] // 2) // step * step)
        if smaller >= dims[name]:
            stuck.add(name)
        dims[name] = min(dims[name], smaller)


def inputs_for(spec: Any, dims: dict[str, int], seed: int, device: str) -> dict[str, Any]:
    import torch

    from gpu_gate.spec import Index

    gen = torch.Generator(device="cpu").manual_seed(seed)
    out: dict[str, Any] = {}
    tied = [n for n, i in spec.inputs.items() if not isinstance(i, Index) and (i.dtype or "").startswith("like:")]
    for name in [n for n in spec.inputs if n not in tied] + tied:  # a dtype "like:x" after x
        inp = spec.inputs[name]
        shape = tuple(dims[s] if isinstance(s, str) else int(s) for s in inp.shape)
        if isinstance(inp, Index):
            high = dims[inp.high] if isinstance(inp.high, str) else int(inp.high)
            value = torch.randint(0, max(1, high), shape, generator=gen, dtype=getattr(torch, inp.dtype))
        elif name in tied:
            value = torch.randn(shape, generator=gen, dtype=torch.float32).to(out[inp.dtype[len("like:"):]].dtype)
        else:
            allowed = list(inp.dtypes or ([inp.dtype] if inp.dtype else ["float32"]))
            dtype = "float32" if "float32" in allowed else allowed[0]
            value = torch.randn(shape, generator=gen, dtype=torch.float32).to(getattr(torch, dtype))
        out[name] = value.to(device)
    return {n: out[n] for n in spec.inputs}


def trial(spec: Any, dims: dict[str, int], seed: int, device: str) -> dict[str, Any]:
    import torch

    from gpu_gate.worker.calling import kwargs_for, normalize

    kwargs = kwargs_for(spec, dims)
    inputs = inputs_for(spec, dims, seed, device)
    with torch.no_grad():
        got = normalize(spec.fn(**{k: v.clone() for k, v in inputs.items()}, **kwargs))
        want = normalize(spec.reference(**{k: v.clone() for k, v in inputs.items()}, **kwargs))
    worst, ok = 0.0, True
    for key, ref in want.items():
        out = got.get(key)
        if not isinstance(ref, torch.Tensor) or not isinstance(out, torch.Tensor) or out.shape != ref.shape:
            return {"seed": seed, "passed": False, "why": f"output {key!r} missing or of another shape"}
        out, ref = out.float(), ref.float()
        ok = ok and bool(torch.allclose(out, ref, atol=ATOL, rtol=RTOL))
        diff = (out - ref).abs().max().item() if out.numel() else 0.0
        worst = max(worst, diff if math.isfinite(diff) else math.inf)
    return {"seed": seed, "passed": ok, "max_abs_diff": worst}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("repo")
    ap.add_argument("spec_file", help="the spec's file, relative to the repository")
    ap.add_argument("--name", help="the spec's name (default: the file's name, as gpu-gate's specs are named)")
    ap.add_argument("--device", default=None)
    args = ap.parse_args()
    root = Path(args.repo).resolve()
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # this gpu-gate, for the spec's `import gpu_gate`
    import torch

    from gpu_gate.testing import job_for
    from gpu_gate.worker.loader import load_spec

    device = args.device or ("cuda" if torch.cuda.is_available() else "cpu")
    name = args.name or Path(args.spec_file).stem
    with tempfile.TemporaryDirectory(prefix="kb-") as tmp:
        spec = load_spec(job_for(root, args.spec_file, name, "equivalence"), root, Path(tmp))
    dims = dims_for(spec)
    trials = []
    for seed in SEEDS:
        try:
            trials.append(trial(spec, dims, seed, device))
        except Exception as exc:  # noqa: BLE001 - a call that raises did not pass
            print(json.dumps({"passed": False, "error": f"{type(exc).__name__}: {str(exc)[:300]}", "dims": dims,
                              "device": device}))
            return 0
    print(json.dumps({"passed": all(t["passed"] for t in trials), "trials": trials, "dims": dims, "device": device}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
