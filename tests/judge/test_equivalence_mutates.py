"""In-place kernels declared, not worked around: ``gg.spec(mutates={input: output})``.

A backward that writes the gradient of ``a`` into ``a``'s memory (Liger-Kernel's GEGLU and SwiGLU
do this) was an ``input-modified`` and ``output-aliases-input`` failure with no way out but a spec
that copies its inputs. Declared, the write is allowed when the input holds exactly that output
afterwards, whose values are judged as always; any other write still fails.
"""
from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from gpu_gate.findings import JobResult, Status
from gpu_gate.inprocess import Context
from gpu_gate.judge.job import run_job
from gpu_gate.protocol.jobs import Job, SpecRef
from gpu_gate.spec import SpecError

HEADER = "import torch\nimport gpu_gate as gg\n"

# A fused backward in the style of Liger's GEGLU: the gradients overwrite the saved inputs.
INPLACE_BACKWARD = """
class ScaleMul(torch.autograd.Function):
    @staticmethod
    def forward(ctx, a, b):
        ctx.save_for_backward(a, b)
        return a * b * 3

    @staticmethod
    def backward(ctx, dc):
        a, b = ctx.saved_tensors
        da = dc * b * 3
        db = dc * a * 3
        a.copy_(da)   # in place, into the caller's tensors
        b.copy_(db)
        return a, b


@gg.spec(dims={{"n": gg.Dim(1, 300)}},
         inputs={{"a": gg.Tensor(("n",), dtypes=["float32"]), "b": gg.Tensor(("n",), dtype="like:a")}},
         reference=lambda a, b: a * b * 3, grads=["a", "b"]{mutates})
def scale_mul_gate(a, b):
    return ScaleMul.apply(a, b)
"""


def _run(root: Path, source: str, name: str) -> JobResult:
    (root / "gate_spec.py").write_text(HEADER + textwrap.dedent(source))
    job = Job(id="j", check="equivalence", level="required", kernels=(), spec=SpecRef("gate_spec.py", name),
              options={"cases": 10, "shrink": False, "growth": False}, seed=3)
    return run_job(job, Context(repo_root=root, device="cpu", workdir=root))


def _kinds(r: JobResult) -> set[str]:
    return {f.kind for f in r.findings if f.severity.value == "error"}


def test_an_undeclared_in_place_backward_fails(tmp_path: Path) -> None:
    r = _run(tmp_path, INPLACE_BACKWARD.format(mutates=""), "scale_mul_gate")
    assert r.status is Status.FAILED
    assert {"input-modified", "output-aliases-input"} <= _kinds(r)
    assert "gg.spec(mutates=" in next(f.message for f in r.findings if f.kind == "input-modified")


def test_a_declared_in_place_backward_passes(tmp_path: Path) -> None:
    src = INPLACE_BACKWARD.format(mutates=', mutates={"a": "grad:a", "b": "grad:b"}')
    r = _run(tmp_path, src, "scale_mul_gate")
    assert r.status is Status.PASSED, [f.message for f in r.findings]
    assert r.cases >= 5


def test_a_declared_input_written_with_something_else_fails(tmp_path: Path) -> None:
    """The attack: declare the write, then leave garbage in the input and return a fresh gradient."""
    src = INPLACE_BACKWARD.format(mutates=', mutates={"a": "grad:a", "b": "grad:b"}').replace(
        "        a.copy_(da)   # in place, into the caller's tensors\n        b.copy_(db)\n        return a, b",
        "        a.fill_(7.0)\n        b.copy_(db)\n        return da, b")
    r = _run(tmp_path, src, "scale_mul_gate")
    assert r.status is Status.FAILED
    msgs = [f.message for f in r.findings if f.kind == "input-modified"]
    assert msgs and "the spec allows only to hold output 'grad:a'" in msgs[0] and "'a'" in msgs[0]


def test_a_declared_write_does_not_excuse_another_input(tmp_path: Path) -> None:
    src = INPLACE_BACKWARD.format(mutates=', mutates={"a": "grad:a"}')
    r = _run(tmp_path, src, "scale_mul_gate")
    assert r.status is Status.FAILED
    assert any(f.kind == "input-modified" and "'b'" in f.message for f in r.findings)
    assert any(f.kind == "output-aliases-input" and "'grad:b'" in f.message for f in r.findings)
    assert not any(f.kind == "output-aliases-input" and "'grad:a'" in f.message for f in r.findings)


def test_a_declared_in_place_op_whose_values_are_wrong_still_fails(tmp_path: Path) -> None:
    src = INPLACE_BACKWARD.format(mutates=', mutates={"a": "grad:a", "b": "grad:b"}').replace(
        "da = dc * b * 3", "da = dc * b * 3.5")
    r = _run(tmp_path, src, "scale_mul_gate")
    assert r.status is Status.FAILED
    assert any(f.kind == "mismatch" and "grad:a" in f.message for f in r.findings)


def test_mutates_must_name_inputs() -> None:
    import gpu_gate as gg

    with pytest.raises(SpecError, match="mutates names 'z', which is not an input"):
        @gg.spec(dims={"n": gg.Dim(1, 8)}, inputs={"x": gg.Tensor(("n",))}, reference=lambda x: x,
                 mutates={"z": "out"})
        def bad(x):  # pragma: no cover - never called
            return x


# A kernel that rotates (here: doubles) its input in place, row by row, as LightLLM's rotary does to q
# and k: each program writes its own row's addresses.
INPLACE_ROWS = """
def double_rows_(x):
    for r in range(x.shape[0]):  # one program per row
        x[r].copy_(x[r] * 2)
    return x


@gg.spec(dims={"rows": gg.Dim(1, 16), "n": gg.Dim(1, 300)},
         inputs={"x": gg.Tensor(("rows", "n"), dtypes=["float32"]), "w": gg.Tensor(("rows", "n"), dtype="like:x")},
         reference=lambda x, w: {"out": x * 2, "wx": w * x}, mutates={"x": "out"})
def double_rows_gate(x, w):
    wx = w * x
    return {"out": double_rows_(x), "wx": wx}
"""


def test_an_input_written_in_place_never_gets_a_layout_whose_elements_share_memory(tmp_path: Path) -> None:
    """An expanded input (every row at the same addresses) written in place row by row doubles one
    row as many times as there are rows: a false failure of a correct kernel, on an input that no
    caller can hand an in-place kernel (torch refuses such writes). The input that is only read
    still gets every layout."""
    from gpu_gate.protocol.cases import ScheduleOptions, schedule
    from gpu_gate.spec import specs_in_module
    import importlib.util

    (tmp_path / "gate_spec.py").write_text(HEADER + textwrap.dedent(INPLACE_ROWS))
    loader = importlib.util.spec_from_file_location("inplace_rows_spec", tmp_path / "gate_spec.py")
    assert loader is not None and loader.loader is not None
    module = importlib.util.module_from_spec(loader)
    loader.loader.exec_module(module)
    (spec,) = specs_in_module(module.__name__)
    layouts = {"x": set(), "w": set()}
    for seed in range(8):
        for case in schedule(spec, ScheduleOptions(cases=24, seed=seed, dtypes=None, max_case_bytes=1 << 20)):
            for name in layouts:
                layouts[name].add(case.inputs[name].layout)
    assert "expanded" not in layouts["x"] and {"transposed", "sliced"} <= layouts["x"], layouts
    assert "expanded" in layouts["w"], layouts
    for seed in (0, 1, 2):
        job = Job(id="j", check="equivalence", level="required", kernels=(), spec=SpecRef("gate_spec.py", "double_rows_gate"),
                  options={"cases": 16, "shrink": False, "growth": False}, seed=seed)
        r = run_job(job, Context(repo_root=tmp_path, device="cpu", workdir=tmp_path))
        assert r.status is Status.PASSED, [f"{f.kind}: {f.message}" for f in r.findings]
