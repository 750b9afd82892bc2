"""Dispatch thresholds: a kernel that takes another code path past a size is run there with the
long reduction that path exists for. The fuzzed cases keep the other dims small when the
reduction is long (to fit the budget); with the canonical case alone, the sweep must reach it by itself."""
from __future__ import annotations

import textwrap
from pathlib import Path

from gpu_gate.findings import JobResult, Status
from gpu_gate.inprocess import Context
from gpu_gate.judge.job import run_job
from gpu_gate.protocol.jobs import Job, SpecRef

SPEC = """
import torch
import gpu_gate as gg


@gg.spec(dims={{"rows": gg.Dim(1, 4096), "n": gg.Dim(1, 65536, reduction=True)}},
         inputs={{"x": gg.Tensor(("rows", "n"), dtypes=["float32"])}},
         reference=lambda x: x.sum(-1))
def row_sum_gate(x):
    {body}
"""
CORRECT = "return x.sum(-1)"
# a "split-K" path for many long rows that drops the last element of each row
SPLIT_PATH_BUG = "return x[..., :-1].sum(-1) if x.shape[0] > 64 and x.shape[-1] > 2048 else x.sum(-1)"


def _run(root: Path, body: str, growth: bool) -> JobResult:
    (root / "gate_spec.py").write_text(textwrap.dedent(SPEC.format(body=body)))
    job = Job(id="j", check="equivalence", level="required", kernels=(), spec=SpecRef("gate_spec.py", "row_sum_gate"),
              options={"cases": 1, "shrink": False, "growth": growth}, seed=5)
    return run_job(job, Context(repo_root=root, device="cpu", workdir=root))


def test_a_path_past_a_size_threshold_is_run_with_a_long_reduction(tmp_path: Path) -> None:
    assert _run(tmp_path, SPLIT_PATH_BUG, growth=False).status is Status.PASSED  # the canonical case alone misses it
    r = _run(tmp_path, SPLIT_PATH_BUG, growth=True)
    assert r.status is Status.FAILED, [f.message for f in r.findings]
    (f,) = [f for f in r.findings if f.kind == "mismatch"]
    assert f.case and f.case.startswith("t-n-rows-"), f.case
    assert "rows=256" in str(f.details.get("case")), f.details.get("case")


def test_the_twin_passes_the_threshold_sweep(tmp_path: Path) -> None:
    r = _run(tmp_path, CORRECT, growth=True)
    assert r.status is Status.PASSED, [f.message for f in r.findings]
    assert r.extra.timing.get("thresholds_s", 0) > 0
