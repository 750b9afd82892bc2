"""The comparison of base and head rules, setting by setting: each change gets its direction."""
from __future__ import annotations

from typing import Any

import pytest

from gpu_gate import pyscan
from gpu_gate.findings import Severity
from gpu_gate.policy import Policy
from gpu_gate.rules import policydiff, specdiff
from gpu_gate.rules.change import RuleChange
from gpu_gate.rules.specrules import SpecRules, _specs_in


def _diff(base: dict[str, Any], head: dict[str, Any]) -> dict[str, tuple[str, str]]:
    changes = policydiff.compare(Policy.model_validate(base), Policy.model_validate(head), ".gpu-gate.yml")
    return {c.what.split(":")[0]: (c.direction, c.what) for c in changes}


@pytest.mark.parametrize("base, head, key, direction, text", [
    ({}, {"checks": {"memcheck": "advisory"}}, "checks.memcheck.level", "weakened", "required -> advisory"),
    ({"checks": {"initcheck": "advisory"}}, {"checks": {"initcheck": "required"}}, "checks.initcheck.level",
     "tightened", "advisory -> required"),
    ({}, {"not_run": "warn"}, "not_run", "weakened", "fail -> warn"),
    ({}, {"refusals": "fail"}, "refusals", "tightened", "warn -> fail"),
    ({}, {"specs": ["gate/**/*_gate.py"]}, "specs", "weakened", "(no longer: **/*_gate.py)"),
    ({}, {"kernels": {"exclude": ["third_party/**", ".git/**", "csrc/**"]}}, "kernels.exclude", "weakened",
     "(now excluded: csrc/**)"),
    ({}, {"checks": {"equivalence": {"cases": 8}}}, "checks.equivalence.cases", "weakened", "64 -> 8"),
    ({}, {"checks": {"equivalence": {"tolerance": {"baseline_factor": 1e6}}}},
     "checks.equivalence.tolerance.baseline_factor", "weakened", "2.0 -> 1000000.0 (x5e+05)"),
    ({}, {"checks": {"equivalence": {"tolerance": {"atol": 1, "rtol": 1}}}}, "checks.equivalence.tolerance.atol",
     "weakened", "a fixed tolerance instead of the baseline-relative rule"),
    ({}, {"checks": {"equivalence": {"dtypes": ["float32"]}}}, "checks.equivalence.dtypes", "weakened",
     "narrowed from all"),
    ({}, {"checks": {"equivalence": {"seed": 7}}}, "checks.equivalence.seed", "weakened", "the same inputs"),
    ({}, {"cuda": {"sanitizer": "tools/x"}}, "cuda.sanitizer", "weakened", "a tool path chosen by this change"),
    ({}, {"rule_changes": "warn"}, "rule_changes", "weakened", "fail -> warn"),
    ({}, {"setup_outputs": ["*.so"]}, "setup_outputs", "weakened", "(now taken from the work tree: *.so)"),
    ({"setup_outputs": ["*.so", "build/**"]}, {"setup_outputs": ["*.so"]}, "setup_outputs", "tightened", "-> [*.so]"),
    ({}, {"runner": {"job_timeout_minutes": 5}}, "runner.job_timeout_minutes", "changed", "30.0 -> 5"),
])
def test_policy_changes_have_a_direction(base: dict[str, Any], head: dict[str, Any], key: str, direction: str,
                                         text: str) -> None:
    found = _diff(base, head)
    assert key in found, found
    assert found[key][0] == direction and text in found[key][1], found[key]
    assert {d for d, _ in found.values()} == {direction}, found  # nothing else is reported


def test_an_equal_policy_has_no_changes() -> None:
    assert _diff({"checks": {"memcheck": "required"}}, {"checks": {"memcheck": {"level": "required"}}}) == {}


def test_only_an_unwarned_weakening_blocks() -> None:
    weak, tight = RuleChange("weakened", "x"), RuleChange("tightened", "y")
    assert weak.finding("fail").severity is Severity.ERROR and weak.finding("fail").kind == "rules-weakened"
    assert weak.finding("warn").severity is Severity.WARNING
    assert tight.finding("fail").severity is Severity.WARNING and tight.finding("fail").kind == "rules-tightened"


BASE_SPEC = '''
import torch
import gpu_gate as gg
from mylib.ops import scale

@gg.spec(dims={"n": gg.Dim(1, 300, reduction=True)},
         inputs={"x": gg.Tensor(("n",), dtypes=["float32", "bfloat16"])},
         reference=lambda x: x * 2, grads=["x"], deterministic=True,
         tolerance=gg.Tolerance(baseline_factor=2.0))
def scale_gate(x):
    return scale(x)
'''


def _spec(source: str) -> SpecRules:
    return _specs_in(pyscan.parse(source, "gate/s_gate.py"), "gate/s_gate.py", source)[0]


def _spec_diff(head_source: str, changed: frozenset[str] = frozenset()) -> list[tuple[str, str]]:
    files = frozenset({"mylib/__init__.py", "mylib/ops.py", "gate/s_gate.py"})
    ctx = specdiff.Context(files, set(changed), lambda f: False, 2.0)
    return [(c.direction, c.what) for c in specdiff.compare(_spec(BASE_SPEC), _spec(head_source), ctx)]


@pytest.mark.parametrize("old, new, direction, text", [
    ("gg.Tolerance(baseline_factor=2.0)", "gg.Tolerance(baseline_factor=50.0)", "weakened",
     "tolerance loosened: baseline_factor 2 -> 50 (x25)"),
    ("gg.Tolerance(baseline_factor=2.0)", "gg.Tolerance(baseline_factor=1.5)", "tightened", "baseline_factor 2 -> 1.5"),
    ("gg.Tolerance(baseline_factor=2.0)", "make_tolerance()", "weakened", "not a literal"),
    ("gg.Dim(1, 300, reduction=True)", "gg.Dim(1, 300)", "weakened", "no longer marked reduction=True"),
    ("gg.Dim(1, 300, reduction=True)", "gg.Dim(1, 4096, reduction=True)", "tightened", "widened: [1, 300] -> [1, 4096]"),
    ('dtypes=["float32", "bfloat16"]', 'dtypes=["float32", "bfloat16", "float16"]', "tightened", "dtypes widened"),
    ('grads=["x"]', "grads=[]", "weakened", "gradients no longer checked for: x"),
    ("deterministic=True", "deterministic=False", "weakened", "deterministic=True removed"),
    ("reference=lambda x: x * 2", "reference=lambda x: x + x", "changed", "reference changed by this change"),
    ("grads=[\"x\"],", "grads=[\"x\"], devices=[\"cpu\"],", "weakened", "devices ['cuda', 'cpu'] -> ['cpu']"),
])
def test_spec_changes_have_a_direction(old: str, new: str, direction: str, text: str) -> None:
    assert old in BASE_SPEC
    found = _spec_diff(BASE_SPEC.replace(old, new))
    assert any(d == direction and text in what for d, what in found), found


def test_formatting_and_comments_do_not_change_a_reference() -> None:
    head = BASE_SPEC.replace("reference=lambda x: x * 2,", "reference=lambda x: (x *  2),  # doubled\n        ")
    assert _spec_diff(head) == []


def test_a_reference_using_a_helper_this_change_modifies_is_a_weakening() -> None:
    head = BASE_SPEC.replace("from mylib.ops import scale", "from mylib.ops import scale\nfrom mylib.refs import twice")
    head = head.replace("reference=lambda x: x * 2", "reference=lambda x: twice(x)")
    files = frozenset({"mylib/__init__.py", "mylib/ops.py", "mylib/refs.py", "gate/s_gate.py"})
    ctx = specdiff.Context(files, {"mylib/refs.py"}, lambda f: False, 2.0)
    found = [(c.direction, c.what) for c in specdiff.compare(_spec(BASE_SPEC), _spec(head), ctx)]
    assert ("weakened", "spec scale_gate: the reference calls into the code under review ('twice' from "
                        "mylib/refs.py; this change modifies it): the kernel would be compared with itself (write "
                        "the reference in plain torch)") in found
    ctx = specdiff.Context(files, set(), lambda f: False, 2.0)
    unchanged = [c.direction for c in specdiff.compare(_spec(BASE_SPEC), _spec(head), ctx)]
    assert "weakened" not in unchanged  # an unchanged pure-torch helper module is not the code under review


def test_a_rule_kept_in_a_spec_module_constant_changes_with_it() -> None:
    base = BASE_SPEC.replace("tolerance=gg.Tolerance(baseline_factor=2.0))", "tolerance=TOL)")
    base = base.replace("from mylib.ops import scale", "from mylib.ops import scale\nTOL = gg.Tolerance(baseline_factor=2.0)")
    head = base.replace("TOL = gg.Tolerance(baseline_factor=2.0)", "TOL = gg.Tolerance(baseline_factor=9e9)")
    ctx = specdiff.Context(frozenset({"mylib/ops.py", "gate/s_gate.py"}), set(), lambda f: False, 2.0)
    assert specdiff.compare(_spec(base), _spec(base), ctx) == []
    found = [(c.direction, c.what) for c in specdiff.compare(_spec(base), _spec(head), ctx)]
    assert [d for d, what in found if "tolerance= changed and is not a literal" in what] == ["weakened"], found


def test_a_rule_imported_from_a_module_this_change_modifies_is_a_weakening() -> None:
    spec = BASE_SPEC.replace("tolerance=gg.Tolerance(baseline_factor=2.0))", "tolerance=TOL)")
    spec = spec.replace("from mylib.ops import scale", "from mylib.ops import scale\nfrom gate.common import TOL")
    files = frozenset({"mylib/ops.py", "gate/common.py", "gate/s_gate.py"})
    ctx = specdiff.Context(files, {"gate/common.py"}, lambda f: False, 2.0)
    found = [(c.direction, c.what) for c in specdiff.compare(_spec(spec), _spec(spec), ctx)]
    assert found == [("weakened", "spec scale_gate: tolerance= uses 'TOL' from gate/common.py, which this change "
                                  "modifies (write the rule in the spec itself)")]


def test_what_the_reports_carry_is_no_rule() -> None:
    """Code scanning's notes on or off changes what a reviewer sees, never what blocks."""
    assert policydiff.compare(Policy.model_validate({"reports": {"sarif_notes": True}}), Policy.model_validate({}),
                              ".gpu-gate.yml") == []
