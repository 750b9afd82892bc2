"""Failures that show by chance (two runs that differ) are classified by the code, not by the case.

An atomic-add column sum that the base and the head share showed two runs differing on one case at
the head, and on another case at the base (H100): that the base's eight retries on the head's case
happened to agree did not make the head's failure new. These tests pin the rule on findings.
"""
from __future__ import annotations

from gpu_gate.judge.equivalence.engine import chance_debt, failure_key, marked
from gpu_gate.findings import Finding


def _new(kind: str, output: str = "out") -> Finding:
    f = Finding(check="equivalence", kind=kind, message=f"{kind} on {output}", spec="gate/x.py::x", case="c0007",
                details={"output": output})
    return marked(f, "new")


def test_a_chance_failure_the_base_shows_elsewhere_is_debt() -> None:
    f = _new("unstable")
    [out] = chance_debt([f], {failure_key(f)})
    assert out.details["change"] == "pre-existing"
    assert "other cases of this job" in out.details["base_note"]


def test_a_chance_failure_on_another_output_stays_new() -> None:
    f = _new("unstable", "out")
    [out] = chance_debt([f], {failure_key(_new("unstable", "grad:x"))})
    assert out.details["change"] == "new"


def test_wrong_values_are_judged_on_their_own_case() -> None:
    """A mismatch is a fact about its case: the base's mismatch elsewhere does not make it debt,
    and a base that only varies elsewhere does not either."""
    f = _new("mismatch")
    [out] = chance_debt([f], {failure_key(f), failure_key(_new("unstable"))})
    assert out.details["change"] == "new"


def test_without_the_base_showing_it_the_failure_stays_new() -> None:
    f = _new("unordered-stream")
    [out] = chance_debt([f], set())
    assert out.details["change"] == "new"
    [out] = chance_debt([f], {failure_key(f)})
    assert out.details["change"] == "pre-existing"
