"""On a GPU: the rounding envelope holds through CUDA autograd (the backward runs on the
device's autograd thread, which must see the dispatch mode), and the equivalence job compiles
the Triton specializations its cases launched, with their resources."""
from __future__ import annotations

import sys
from pathlib import Path

import pytest

from gpu_gate.protocol.cases import Case, InputChoice
from gpu_gate.findings import Severity, Status
from gpu_gate.inprocess import Context
from gpu_gate.judge.job import run_job
from gpu_gate.protocol.jobs import Job, SpecRef

pytestmark = pytest.mark.gpu

CORPUS = Path(__file__).parents[1] / "corpus"
sys.path.insert(0, str(Path(__file__).parents[1]))

from test_compile_launched import KERNELS, SPEC  # noqa: E402


def _long_case(dist: str) -> str:
    inputs = {"x": InputChoice("float32", dist, "contiguous"), "w": InputChoice("float32", "normal", "contiguous")}
    return Case("long", 3, {"rows": 1 << 18, "hidden": 8}, inputs).token()


@pytest.mark.parametrize("dist", ["normal", "uniform_pos"])
@pytest.mark.parametrize("name, passes", [("dweight_fp32_sequential", True), ("dweight_bf16_acc", False)])
def test_sequential_fp32_dweight_passes_and_bf16_fails_on_cuda(name: str, passes: bool, dist: str,
                                                               tmp_path: Path) -> None:
    job = Job(id="j", check="equivalence", level="required", kernels=(), spec=SpecRef("dweight.py", name),
              options={"shrink": False}, seed=3, case=_long_case(dist))
    r = run_job(job, Context(repo_root=CORPUS, device="cuda", workdir=tmp_path))
    errors = [f.message for f in r.findings if f.severity is Severity.ERROR]
    assert (r.status is Status.PASSED) is passes, errors


def test_launched_triton_specializations_are_compiled_with_their_resources(tmp_path: Path) -> None:
    (tmp_path / "tlib").mkdir()
    (tmp_path / "tlib" / "__init__.py").write_text("")
    (tmp_path / "tlib" / "kern.py").write_text(KERNELS)
    (tmp_path / "scale_gate.py").write_text(SPEC)
    job = Job(id="j", check="equivalence", level="required", kernels=("tlib/kern.py",),
              spec=SpecRef("scale_gate.py", "scale_gate"), seed=0,
              options={"cases": 8, "shrink": False, "growth": False,
                       "compile": {"archs": ["sm_80", "sm_90"], "level": "required"}})
    r = run_job(job, Context(repo_root=tmp_path, device="cuda", workdir=tmp_path))
    assert r.status is Status.PASSED, [f.message for f in r.findings]
    launched = {(x["constexprs"]["BLOCK"], x["signature"]["x_ptr"]) for x in r.extra.specializations}
    rows = r.extra.launch_resources
    compiled = {(x["constexprs"]["BLOCK"], x["signature"]["x_ptr"]) for x in rows}
    assert compiled == launched and {x["arch"] for x in rows} == {"sm_80", "sm_90"}
    assert all(x["registers"] > 0 and x["file"] == "tlib/kern.py" for x in rows)
