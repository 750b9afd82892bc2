"""A job whose time limit comes before its floor of cases is not run, with the reason: never passed
on the cases it reached. In-process workers (the judge's side is the same code), on the CPU."""
from __future__ import annotations

import textwrap
import time
from pathlib import Path

from gpu_gate.findings import Status
from gpu_gate.inprocess import Context
from gpu_gate.judge.job import run_job
from gpu_gate.protocol.jobs import Job, SpecRef

SPEC = """\
import time

import torch
import gpu_gate as gg


def slow_sum(x):
    time.sleep(1.5)
    return x.double().sum(-1).to(x.dtype)


@gg.spec(dims={"rows": gg.Dim(1, 8), "n": gg.Dim(1, 32)},
         inputs={"x": gg.Tensor(("rows", "n"), dtypes=["float32", "float16"])},
         reference=lambda x: x.sum(-1), devices=["cpu"])
def slow_gate(x):
    return slow_sum(x)
"""


def test_a_job_that_cannot_reach_its_floor_is_not_run(tmp_path: Path) -> None:
    root = tmp_path / "repo"
    (root / "gate").mkdir(parents=True)
    (root / "gate" / "slow_gate.py").write_text(textwrap.dedent(SPEC))
    job = Job(id="equivalence:gate/slow_gate.py::slow_gate", check="equivalence", level="required", kernels=(),
              spec=SpecRef("gate/slow_gate.py", "slow_gate"), seed=5,
              options={"cases": 8, "growth": False, "shrink": False, "time_budget_s": 0.5,
                       "candidate_budget_s": 0.5})
    ctx = Context(repo_root=root, device="cpu", workdir=root / "work", deadline=time.monotonic() + 10)
    r = run_job(job, ctx)
    assert r.status is Status.NOT_RUN, (r.status, r.reason, [f.message for f in r.findings])
    assert r.reason is not None and "floor" in r.reason and "not reached" in r.reason
    assert [f.kind for f in r.findings if f.kind == "floor-not-reached"] == ["floor-not-reached"]
    assert 1 <= r.cases < 8
