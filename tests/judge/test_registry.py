"""The registry of checks: one entry per check, its traits read wherever the gate asks "which checks
...", its modules holding to the interface, the policy naming the same checks."""
from __future__ import annotations

import subprocess
import sys

import pytest

from gpu_gate.judge.checks import CHECKS, check_info
from gpu_gate.policy.models import Checks, Policy
from gpu_gate.protocol.jobs import Job, SpecRef


def test_the_policy_names_the_registrys_checks_in_its_order() -> None:
    assert tuple(Checks.model_fields) == tuple(CHECKS)
    off_by_default = {"speed"}  # timing needs a quiet GPU: a repository turns it on
    assert [name for name, _ in Policy().enabled_checks()] == [n for n in CHECKS if n not in off_by_default]
    assert {n for n in CHECKS if Policy().check(n).level == "off"} == off_by_default


def test_every_module_has_the_interface_and_a_tool_means_wrap_and_collect() -> None:
    for info in CHECKS.values():
        module = info.load()
        assert callable(module.run), info.name
        wrapping = info.wrapping()
        assert (wrapping is not None) == (info.tool is not None), info.name
        if wrapping is not None:
            assert callable(wrapping.wrap) and callable(wrapping.collect), info.name


def test_traits_the_plan_reads() -> None:
    from gpu_gate.plan import _cost, _options

    policy = Policy()
    for name, info in CHECKS.items():
        opts = _options(policy, name, policy.check(name))
        assert ("autotune" in opts) == info.runs_candidate, name
        assert ("nvcc_flags" in opts) == info.compiler.cuda_flags, name
        assert ("compile" in opts) == info.compiler.launched, name
    assert _cost("equivalence", {"cases": 128}) == 2 * CHECKS["equivalence"].cost
    assert _cost("racecheck", {"cases": 128}) == CHECKS["racecheck"].cost  # the tool's cases are few and fixed


def test_what_the_executor_reads_from_the_traits(tmp_path) -> None:  # type: ignore[no-untyped-def]
    from gpu_gate.executor.argv import _context
    from gpu_gate.executor.options import ExecOptions
    from gpu_gate.executor.slots import memory_need

    def job(check: str) -> Job:
        return Job(id=f"{check}:x", check=check, level="required", kernels=(), spec=SpecRef("g.py", "g"),
                   options={"max_case_bytes": 1 << 20})

    opts = ExecOptions(repo_root=tmp_path, gpus=(), timeout_s=60)
    assert _context(opts, "0", job("memcheck"))["sanitizer"] == "memcheck"
    assert _context(opts, "0", job("equivalence"))["sanitizer"] is None
    assert memory_need(job("equivalence")) == 4 * (1 << 20) + (512 << 20)  # by the case budget
    assert memory_need(job("racecheck")) == memory_need(job("compile")) == 2 << 30  # a fixed allowance
    assert memory_need(job("no-such-check")) == 2 << 30  # a plan file's unknown check fails in its job


def test_differential_by_what() -> None:
    assert {n for n, c in CHECKS.items() if c.differential == "cases"} == {
        "equivalence", "determinism", "memcheck", "racecheck", "synccheck", "initcheck", "speed"}
    assert {n for n, c in CHECKS.items() if c.differential == "build"} == {"compile"}
    assert check_info("coverage") is None  # a finding's check that is no registered check


@pytest.mark.parametrize("module", ["gpu_gate.judge.checks", "gpu_gate.policy.models", "gpu_gate.plan"])
def test_reading_the_registry_imports_no_gpu_stack(module: str) -> None:
    code = (f"import sys, {module}\n"
            "bad = [m for m in ('torch', 'triton', 'cupy') if m in sys.modules]\n"
            "assert not bad, bad\n")
    subprocess.run([sys.executable, "-c", code], check=True)
