"""The benchmarks' own verifiers. KernelBench: both models built under one seed, one call on
``get_inputs()``, ``torch.allclose(atol=1e-2, rtol=1e-2)``; ``python benchmark_verifier.py PROBLEM SUBMISSION``.
SOL-ExecBench: each workload's sizes, ``torch.randn`` inputs with norm weights set to ones, the same
allclose; ``python benchmark_verifier.py --sol DEFINITION WORKLOADS SOLUTION``. Each prints ``pass`` or
``fail: ...`` (one line per submission, in order). The tests run it in a process of its own beside ``gpu-gate audit``, to
show both verdicts; gpu-gate itself never runs a submission outside its sandbox."""
import importlib
import importlib.util
import json
import os
import sys
import tempfile
from pathlib import Path

import torch


DEVICE = os.environ.get("BENCHMARK_DEVICE", "cpu")  # cuda: on the GPU (on the CPU, Triton's interpreter runs)


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
    if DEVICE != "cpu":  # as the benchmark runs it on a GPU: models and inputs moved there
        ref, new = ref.to(DEVICE), new.to(DEVICE)
        inputs = [x.to(DEVICE) if isinstance(x, torch.Tensor) else x for x in inputs]
    with torch.no_grad():
        want, got = ref(*inputs), new(*inputs)
    if want.shape != got.shape:
        return f"fail: shape {tuple(got.shape)} != {tuple(want.shape)}"
    if not torch.allclose(want, got, atol=1e-2, rtol=1e-2):
        return f"fail: max abs diff {float((want - got).abs().max()):.3g}"
    return "pass"


def verify_sol(definition_path: str, workloads_path: str, solution_path: str) -> str:
    defn = json.loads(Path(definition_path).read_text())
    solution = json.loads(Path(solution_path).read_text())
    namespace: dict = {}
    exec(defn["reference"], namespace)
    with tempfile.TemporaryDirectory() as tmp:
        for s in solution["sources"]:
            (Path(tmp) / s["path"]).write_text(s["content"])
        sys.path.insert(0, tmp)
        path, _, func = solution["spec"].get("entry_point", "main.py::run").partition("::")
        sys.modules.pop(path[:-3].replace("/", "."), None)  # the previous solution's module of that name
        run = getattr(importlib.import_module(path[:-3].replace("/", ".")), func)
        dps = solution["spec"].get("destination_passing_style", True)
        for line in Path(workloads_path).read_text().splitlines():
            load = json.loads(line)["workload"]
            size = {a: v["value"] for a, v in defn["axes"].items() if v["type"] == "const"} | load["axes"]
            torch.manual_seed(42)
            args = []
            for name, t in defn["inputs"].items():
                if t["shape"] is None:
                    args.append(load["inputs"][name]["value"])
                    continue
                shape = [size[a] for a in t["shape"]]
                make = torch.ones if "weight" in name else torch.randn
                args.append(make(*shape).to(getattr(torch, t["dtype"])).to(DEVICE))
            want = namespace["run"](*args)
            if dps:
                got = torch.empty_like(want)
                run(*args, got)
            else:
                got = run(*args)
            if not torch.allclose(want.float(), got.float(), atol=1e-2, rtol=1e-2):
                return f"fail: workload {load['uuid']}: max abs diff {float((want.float() - got.float()).abs().max()):.3g}"
    return "pass"


def _guarded(check, *args: str) -> str:  # type: ignore[no-untyped-def]
    try:
        return check(*args)
    except Exception as exc:  # a submission that does not run fails the verifier, as in the benchmark
        return f"fail: {type(exc).__name__}: {exc}"


if __name__ == "__main__":
    # One process for many submissions (torch and Triton imported once): one verdict per line, in order.
    #   benchmark_verifier.py PROBLEM SUBMISSION [PROBLEM SUBMISSION ...]
    #   benchmark_verifier.py --sol DEFINITION WORKLOADS SOLUTION [SOLUTION ...]
    argv = sys.argv[1:]
    if argv[0] == "--sol":
        for solution in argv[3:]:
            print(_guarded(verify_sol, argv[1], argv[2], solution), flush=True)
    else:
        for problem, submission in zip(argv[::2], argv[1::2]):
            print(_guarded(verify, problem, submission), flush=True)
