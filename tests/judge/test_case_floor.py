"""A minimum of verified cases that the candidate cannot spend.

The equivalence budget is gpu-gate's own time; the kernel's calls are counted apart (and may add up
to as much again). A first call that sleeps ("autotuning") no longer leaves one case verified and a
float16 bug unrun; a slow but correct kernel is a ``slow-case`` finding, not a pass on one case.
Real git repositories, the CLI, sandboxed workers on the CPU.
"""
from __future__ import annotations

import json

from conftest_git import GitRepo
from test_cli import gate
from test_differential import KERNEL, _pr

POLICY = """\
version: 1
kernels: {include: ["csrc/**/*.cu"]}
specs: ["gate/**/*_gate.py"]
not_run: fail
checks:
  compile: off
  determinism: off
  memcheck: off
  racecheck: off
  synccheck: off
  initcheck: off
  equivalence: {cases: 6, growth: false, shrink: false, seed: 7, time_budget_s: 4}
"""
# the slow twins: gpu-gate's own budget is ample (this is about the kernel's time, not a loaded machine's)
SLOW_POLICY = POLICY.replace("time_budget_s: 4}", "time_budget_s: 60, slow_case_s: 2}")
SPEC = """\
import torch
import gpu_gate as gg
from mylib.ops import row_sum


@gg.spec(dims={"rows": gg.Dim(1, 16), "n": gg.Dim(1, 64, reduction=True)},
         inputs={"x": gg.Tensor(("rows", "n"), dtypes=["float32", "float16"])},
         reference=lambda x: x.sum(-1),
         covers=["csrc/rows.cu"],
         devices=["cuda", "cpu"])
def row_sum_gate(x):
    return row_sum(x)
"""
EXACT = "def row_sum(x):\n    return x.double().sum(-1).to(x.dtype)\n"
# "Autotuning": the first call takes 8 s, twice gpu-gate's own budget. Wrong on float16.
AUTOTUNED = """\
import time

import torch

_TUNED = []


def row_sum(x):
    if not _TUNED:
        time.sleep(8)
        _TUNED.append(True)
    if x.dtype == torch.float16:
        return torch.zeros(x.shape[:-1], dtype=x.dtype)
    return x.double().sum(-1).to(x.dtype)
"""
# Correct, and every call takes 2.5 s (over slow_case_s).
SLOW = """\
import time


def row_sum(x):
    time.sleep(2.5)
    return x.double().sum(-1).to(x.dtype)
"""


def _repo(make_repo, policy: str = POLICY) -> GitRepo:  # type: ignore[no-untyped-def]
    r = make_repo("proj", {".gitignore": ".gpu-gate/\n", ".gpu-gate.yml": policy, "mylib/__init__.py": "",
                           "mylib/ops.py": EXACT, "csrc/rows.cu": KERNEL, "gate/rows_gate.py": SPEC})
    r.branch("feature")
    return r


def _check(r: GitRepo) -> tuple[int, str, dict]:  # type: ignore[type-arg]
    p = gate("check", "--base", "main", "--cpu", cwd=r.path)
    out = r.path / ".gpu-gate" / "out" / "results.json"
    results = json.loads(out.read_text()) if out.exists() else {}
    runs = [x for x in results.get("results", []) if x["check"] == "equivalence"]
    return p.returncode, p.stdout + p.stderr, runs[0] if runs else {}


def test_a_slow_first_call_cannot_spend_the_cases(make_repo) -> None:  # type: ignore[no-untyped-def]
    r = _repo(make_repo)
    _pr(r, AUTOTUNED)
    code, text, run = _check(r)
    assert code == 1, text
    # every case, or (on a machine loaded enough to spend gpu-gate's own 4 s) at least the floor,
    # which holds the first float16 case
    assert run["status"] == "failed" and run["cases"] >= 4, text
    bad = [f for f in run["findings"] if f["severity"] == "error"]
    assert bad and all("float16" in f["message"] for f in bad), bad


def test_the_slow_first_call_is_a_slow_case(make_repo) -> None:  # type: ignore[no-untyped-def]
    r = _repo(make_repo, SLOW_POLICY)
    _pr(r, AUTOTUNED)
    code, text, run = _check(r)
    assert code == 1, text
    slow = [f for f in run["findings"] if f["kind"] == "slow-case"]
    assert slow and slow[0]["severity"] == "warning" and slow[0]["details"]["cases"][0] == "c0000", run["findings"]


def test_a_slow_correct_kernel_is_a_slow_case_not_a_pass_on_one_case(make_repo) -> None:  # type: ignore[no-untyped-def]
    r = _repo(make_repo, SLOW_POLICY)
    _pr(r, SLOW)
    code, text, run = _check(r)
    assert code == 0, text
    assert run["status"] == "passed" and run["cases"] == 6, text
    slow = [f for f in run["findings"] if f["kind"] == "slow-case"]
    assert slow and slow[0]["severity"] == "warning" and len(slow[0]["details"]["cases"]) == 6, run["findings"]
    assert "slow-case" in text


def test_the_base_policy_can_make_a_slow_case_block(make_repo) -> None:  # type: ignore[no-untyped-def]
    r = _repo(make_repo, SLOW_POLICY.replace("slow_case_s: 2}", "slow_case_s: 2, slow_case: fail}"))
    _pr(r, SLOW)
    code, text, run = _check(r)
    assert code == 1, text
    assert [f["severity"] for f in run["findings"] if f["kind"] == "slow-case"] == ["error"], run["findings"]
