"""Production shapes from the policy always run: a kernel wrong only at the size a model uses is
caught whatever the fuzzing picks, and a shape that cannot run here says why."""
from __future__ import annotations

import textwrap
from pathlib import Path

from gpu_gate.protocol.cases import ScheduleOptions, production_cases
from gpu_gate.findings import JobResult, Severity, Status
from gpu_gate.inprocess import Context
from gpu_gate.judge.job import run_job
from gpu_gate.protocol.jobs import Job, SpecRef
from gpu_gate.spec import Dim, Tensor, spec

SPEC = """
import torch
import gpu_gate as gg


@gg.spec(dims={{"rows": gg.Dim(1, 4096), "hidden": gg.Dim(1, 8192)}},
         inputs={{"x": gg.Tensor(("rows", "hidden"), dtypes=["float32"])}},
         reference=lambda x: x * 0.5)
def half_gate(x):
    {body}
"""
CORRECT = "return x * 0.5"
# wrong only at one width nobody fuzzes: a "tuned" path for a model's hidden size
AT_3000 = "return x * (0.5 if x.shape[-1] != 3000 else 0.49)"


def _run(root: Path, body: str, shapes: list[dict[str, int]] | None) -> JobResult:
    (root / "gate_spec.py").write_text(textwrap.dedent(SPEC.format(body=body)))
    opts: dict[str, object] = {"cases": 12, "shrink": False, "growth": False}
    if shapes is not None:
        opts["shapes"] = shapes
    job = Job(id="j", check="equivalence", level="required", kernels=(), spec=SpecRef("gate_spec.py", "half_gate"),
              options=opts, seed=11)
    return run_job(job, Context(repo_root=root, device="cpu", workdir=root))


def test_a_bug_at_a_production_shape_is_caught_only_when_the_shape_runs(tmp_path: Path) -> None:
    assert _run(tmp_path, AT_3000, None).status is Status.PASSED  # the fuzzing alone misses it
    r = _run(tmp_path, AT_3000, [{"rows": 4, "hidden": 3000}])
    assert r.status is Status.FAILED
    (f,) = [f for f in r.findings if f.kind == "mismatch"]
    assert f.case == "p0000" and "hidden=3000" in str(f.details.get("case"))


def test_the_twin_passes_and_runs_the_shape_on_top_of_the_cases(tmp_path: Path) -> None:
    r = _run(tmp_path, CORRECT, [{"rows": 4, "hidden": 3000}, {"hidden": 4096}])
    assert r.status is Status.PASSED, [f.message for f in r.findings]
    assert r.cases == 14


def test_shapes_that_cannot_run_here_say_why() -> None:
    s = spec(dims={"rows": Dim(1, 64), "hidden": Dim(1, 8192)}, inputs={"x": Tensor(("rows", "hidden"))},
             reference=lambda x: x)(lambda x: x)
    opts = ScheduleOptions(cases=4, seed=1, dtypes=None, max_case_bytes=1 << 20,
                           shapes=({"rows": 64, "hidden": 8192}, {"hidden": 9000}, {"hidden": 64, "heads": 8},
                                   {"vocab": 32000}))
    cases, skipped = production_cases(s, opts, 1 << 20)
    assert cases == []
    assert any("rows=64, hidden=8192} in float32: " in w and "MiB, over the 1.0 MiB a case may take here" in w
               for w in skipped), skipped
    assert any("hidden=9000}: outside the spec's dims (hidden in 1..8192)" in w for w in skipped), skipped
    assert any("this spec has no dim 'heads'" in w for w in skipped), skipped
    assert not any("vocab" in w for w in skipped)  # a shape for other specs is not this spec's business


def test_a_shape_too_large_for_the_machine_is_not_verified_and_fails_closed(tmp_path: Path) -> None:
    r = _run(tmp_path, CORRECT, [{"rows": 4096, "hidden": 8192}, {"rows": 2, "hidden": 8192}])
    (f,) = [f for f in r.findings if f.kind == "shape-not-run"]
    assert f.severity is Severity.ERROR and "over the" in f.message
    assert r.cases == 13  # the shape that fits ran
