"""The escaped-process judgment reads each worker by what it runs: the compile check's head code runs
in its ``compiler`` worker, not a ``candidate``; what that worker leaves is the change's, and a
process the base's compiler leaves too is pre-existing."""
from __future__ import annotations

from pathlib import Path

from gpu_gate.executor.leftovers import Left, judge_escapes
from gpu_gate.findings import JobResult, Status


def _passed() -> JobResult:
    return JobResult(job_id="compile:lib/k.py", check="compile", status=Status.PASSED, level="required")


def test_a_process_the_changed_compiler_leaves_blocks_in_a_differential_run() -> None:
    left = Left(7, 1, 0.5, "python -c sleep-forever")
    r = judge_escapes(_passed(), {"compiler": 1}, {"compiler": [left], "base": []}, [Path("/tmp/j")], True, False,
                      "killed", head="compiler")
    assert r.status is Status.FAILED
    (f,) = r.findings
    assert f.kind == "escaped-process" and f.details["change"] == "new" and "sleep-forever" in f.message


def test_a_process_the_base_s_compiler_leaves_too_is_pre_existing() -> None:
    ours, theirs = Left(7, 1, 0.5, "python -m helper 12"), Left(9, 1, 0.4, "python -m helper 31")
    r = judge_escapes(_passed(), {"compiler": 1, "base": 1}, {"compiler": [ours], "base": [theirs]},
                      [Path("/tmp/j")], True, False, "killed", head="compiler")
    assert r.status is Status.PASSED
    assert {f.details["change"] for f in r.findings} == {"pre-existing"}
