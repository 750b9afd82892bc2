"""The benchmark's own verifier, as KernelBench runs it: both models built under one seed, one call on
``get_inputs()``, ``torch.allclose(atol=1e-2, rtol=1e-2)``. ``python benchmark_verifier.py PROBLEM SUBMISSION``
prints ``pass`` or ``fail: ...``. The tests run it in a process of its own beside ``gpu-gate audit``, to
show both verdicts; gpu-gate itself never runs a submission outside its sandbox."""
import importlib.util
import sys

import torch


def _load(path: str, name: str):  # type: ignore[no-untyped-def]
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def verify(problem_path: str, submission_path: str) -> str:
    problem = _load(problem_path, "problem")
    sub = _load(submission_path, "submission")
    init = problem.get_init_inputs()
    torch.manual_seed(42)
    ref = problem.Model(*init)
    torch.manual_seed(42)
    new = sub.ModelNew(*init)
    torch.manual_seed(42)
    inputs = problem.get_inputs()
    with torch.no_grad():
        want, got = ref(*inputs), new(*inputs)
    if want.shape != got.shape:
        return f"fail: shape {tuple(got.shape)} != {tuple(want.shape)}"
    if not torch.allclose(want, got, atol=1e-2, rtol=1e-2):
        return f"fail: max abs diff {float((want - got).abs().max()):.3g}"
    return "pass"


if __name__ == "__main__":
    print(verify(sys.argv[1], sys.argv[2]))
