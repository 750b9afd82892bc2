"""The base decides: a pull request cannot rewrite the rules it is judged by.

Each attack below turned a buggy kernel's red gate green before the base's policy and specs were in
force; each now fails with the reason in the report. Each has a legitimate twin that must pass.
The kernels are plain torch (they run on the CPU); `csrc/scale.cu` is the changed kernel file the
spec covers, and `mylib/ops.py` is the code the spec's candidate calls.
"""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from conftest_git import GitRepo
from test_cli import gate

POLICY = """\
version: 1
kernels: {include: ["csrc/**/*.cu"]}
specs: ["gate/**/*_gate.py"]
not_run: warn
checks:
  compile: off
  determinism: off
  memcheck: off
  racecheck: off
  synccheck: off
  initcheck: off
  equivalence: {cases: 6, growth: false, shrink: false}
"""

OPS = "def scale(x):\n    return x * 2\n"
BUGGY_OPS = "def scale(x):\n    # faster for long rows\n    return x * 2 if x.numel() <= 64 else x * 2.5\n"

SPEC = """\
import torch
import gpu_gate as gg
from mylib.ops import scale


@gg.spec(dims={{"n": gg.Dim(1, 300)}},
         inputs={{"x": gg.Tensor(("n",), dtypes=["float32", "float16"])}},
         reference={reference},
         covers=["csrc/scale.cu"],{extra}
         devices=["cuda", "cpu"])
def scale_gate(x):
    return {call}
"""


def spec(reference: str = "lambda x: x * 2", extra: str = "", call: str = "scale(x)",
         n: str = "gg.Dim(1, 300)", dtypes: str = '["float32", "float16"]') -> str:
    text = SPEC.format(reference=reference, extra=extra, call=call)
    return text.replace("gg.Dim(1, 300)", n).replace('["float32", "float16"]', dtypes)


KERNEL = "__global__ void scale(float* x, int n) { int i = threadIdx.x; if (i < n) x[i] *= 2.0f; }\n"


def _base(make_repo, policy: str = POLICY) -> GitRepo:  # type: ignore[no-untyped-def]
    r = make_repo("proj", {".gpu-gate.yml": policy, "mylib/__init__.py": "", "mylib/ops.py": OPS,
                           "csrc/scale.cu": KERNEL, "gate/scale_gate.py": spec()})
    r.branch("feature")
    return r


def _pr(r: GitRepo, files: dict[str, str | bytes], delete: tuple[str, ...] = ()) -> None:
    for rel in delete:
        r.git("rm", "-q", rel)
    r.commit("pull request", {"csrc/scale.cu": KERNEL.replace("2.0f", "2.00f"), **files})


def _check(r: GitRepo) -> tuple[int, str, dict]:  # type: ignore[type-arg]
    p = gate("check", "--base", "main", "--cpu", cwd=r.path)
    out = r.path / ".gpu-gate" / "out"
    report = (out / "report.md").read_text() if (out / "report.md").exists() else ""
    results = json.loads((out / "results.json").read_text()) if (out / "results.json").exists() else {}
    return p.returncode, p.stdout + p.stderr + report, results


def _kinds(results: dict) -> set[str]:  # type: ignore[type-arg]
    kinds = {f["kind"] for f in results.get("plan_findings", [])}
    return kinds | {f["kind"] for r in results.get("results", []) for f in r["findings"]}


def _equivalence_status(results: dict) -> str | None:  # type: ignore[type-arg]
    return next((r["status"] for r in results.get("results", []) if r["check"] == "equivalence"), None)


# --- the policy: attacks and twins ------------------------------------------------------------

@pytest.mark.parametrize("policy_change, reason", [
    (POLICY.replace("equivalence: {cases: 6", "equivalence: {level: advisory, cases: 6"),
     "checks.equivalence.level: required -> advisory"),
    (POLICY.replace("equivalence: {cases: 6, growth: false, shrink: false}", "equivalence: off"),
     "checks.equivalence.level: required -> off"),
    (POLICY.replace('include: ["csrc/**/*.cu"]', 'include: ["csrc/vendor/**/*.cu"]'),
     "kernels.include: [csrc/**/*.cu] -> [csrc/vendor/**/*.cu] (no longer: csrc/**/*.cu)"),
])
def test_a_pull_request_cannot_relax_its_policy(make_repo, policy_change: str, reason: str) -> None:  # type: ignore[no-untyped-def]
    r = _base(make_repo)
    _pr(r, {"mylib/ops.py": BUGGY_OPS, ".gpu-gate.yml": policy_change})
    code, text, results = _check(r)
    assert code == 1, text
    assert "policy: .gpu-gate.yml at base" in text and "the base decides" in text
    assert _equivalence_status(results) == "failed"  # the base's policy ran the check, and it caught the bug
    assert f"rules weakened by this change: {reason}" in text
    assert "rules-weakened" in _kinds(results)


def test_uncovered_ignore_and_a_deleted_spec_do_not_hide_the_kernel(make_repo) -> None:  # type: ignore[no-untyped-def]
    r = _base(make_repo)
    _pr(r, {"mylib/ops.py": BUGGY_OPS, ".gpu-gate.yml": POLICY + "uncovered: ignore\n"}, delete=("gate/scale_gate.py",))
    code, text, results = _check(r)
    assert code == 1, text
    kinds = _kinds(results)
    assert "uncovered" in kinds  # the base's `uncovered: fail` is in force
    assert "rules weakened by this change: uncovered: fail -> ignore" in text
    assert "spec scale_gate deleted while the kernels it checks remain (csrc/scale.cu" in text


def test_a_pull_request_that_tightens_the_policy_passes_and_says_so(make_repo) -> None:  # type: ignore[no-untyped-def]
    r = _base(make_repo)
    tighter = POLICY.replace("not_run: warn", "not_run: fail").replace("cases: 6", "cases: 8")
    _pr(r, {".gpu-gate.yml": tighter})
    code, text, results = _check(r)
    assert code == 0, text
    assert "rules tightened by this change: checks.equivalence.cases: 6 -> 8" in text
    assert "rules tightened by this change: not_run: warn -> fail" in text
    assert "rules-weakened" not in _kinds(results)


def test_rule_changes_warn_in_the_base_lets_a_weakening_through_reported(make_repo) -> None:  # type: ignore[no-untyped-def]
    r = _base(make_repo, POLICY + "rule_changes: warn\n")
    _pr(r, {".gpu-gate.yml": POLICY + "rule_changes: warn\nrefusals: ignore\n"})
    code, text, _ = _check(r)
    assert code == 0, text
    assert "rules weakened by this change: refusals: warn -> ignore (allowed by the base policy's" in text


def test_the_head_cannot_grant_itself_rule_changes_warn(make_repo) -> None:  # type: ignore[no-untyped-def]
    r = _base(make_repo)
    _pr(r, {".gpu-gate.yml": POLICY + "rule_changes: warn\nrefusals: ignore\n"})
    code, text, _ = _check(r)
    assert code == 1, text
    assert "rules weakened by this change: rule_changes: fail -> warn" in text


def test_a_malformed_head_policy_is_still_an_error_at_its_line(make_repo) -> None:  # type: ignore[no-untyped-def]
    r = _base(make_repo)
    _pr(r, {".gpu-gate.yml": POLICY + "uncoverd: warn\n"})
    p = gate("check", "--base", "main", "--cpu", "--strict", cwd=r.path)
    assert p.returncode == 2
    assert "gpu-gate: error: .gpu-gate.yml:13:1: unknown key 'uncoverd'" in p.stderr


def test_local_policy_flag_is_the_runners_override_but_not_in_actions(make_repo, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    r = _base(make_repo)
    lax = POLICY.replace("equivalence: {cases: 6", "equivalence: {level: advisory, cases: 6")
    _pr(r, {"mylib/ops.py": BUGGY_OPS, "ci/gate.yml": lax})
    p = gate("plan", "--base", "main", "--policy", "ci/gate.yml", cwd=r.path)
    assert json.loads(p.stdout)["jobs"][0]["level"] == "advisory"  # on one's own machine: as given
    p = gate("plan", "--base", "main", "--policy", "ci/gate.yml", cwd=r.path, env={"GITHUB_ACTIONS": "true"})
    assert p.returncode == 0, p.stderr
    plan = json.loads(p.stdout)
    assert plan["policy_source"] == "default preset"  # the base has no ci/gate.yml: the PR's file is not used
    assert all(j["level"] == "required" for j in plan["jobs"] if j["check"] == "equivalence")
    outside = tmp_path / "runner-policy.yml"
    outside.write_text(lax)
    p = gate("plan", "--base", "main", "--policy", str(outside), cwd=r.path, env={"GITHUB_ACTIONS": "true"})
    assert json.loads(p.stdout)["jobs"][0]["level"] == "advisory"  # the runner's own file, outside the repository


def test_report_judges_with_the_base_policy_not_the_checkouts(make_repo) -> None:  # type: ignore[no-untyped-def]
    r = _base(make_repo)
    _pr(r, {".gpu-gate.yml": POLICY + "uncovered: ignore\n", "csrc/other.cu": KERNEL})
    code, _, results = _check(r)
    assert code == 1 and "uncovered" in _kinds(results)
    p = gate("report", ".gpu-gate/out/results.json", "--out", "again", "--no-github", cwd=r.path)
    assert p.returncode == 1, p.stdout + p.stderr
    assert "csrc/other.cu changed but no gate spec covers it" in p.stdout


# --- the spec: attacks and twins ----------------------------------------------------------------

@pytest.mark.parametrize("head_spec, reason", [
    (spec(extra="\n         tolerance=gg.Tolerance(atol=1e6, rtol=1e6),"),
     "tolerance loosened: a fixed atol=1000000.0 replaces the baseline-relative rule"),
    (spec(n="gg.Dim(1, 64)"), "dim 'n' narrowed: [1, 300] -> [1, 64]"),
    (spec(dtypes='["float16"]'), "input 'x' dtypes narrowed: ['float32', 'float16'] -> ['float16']"),
    (spec(extra="\n         checks=[],"), "checks removed from the spec: compile, equivalence"),
])
def test_a_pull_request_cannot_loosen_its_spec(make_repo, head_spec: str, reason: str) -> None:  # type: ignore[no-untyped-def]
    r = _base(make_repo)
    _pr(r, {"mylib/ops.py": BUGGY_OPS, "gate/scale_gate.py": head_spec})
    code, text, results = _check(r)
    assert code == 1, text
    assert f"spec scale_gate: {reason}" in text
    assert "rules-weakened" in _kinds(results)
    assert _equivalence_status(results) == "failed"  # judged by the base's spec, which sees the bug


def test_a_rewritten_reference_does_not_judge_its_own_change(make_repo) -> None:  # type: ignore[no-untyped-def]
    r = _base(make_repo)
    matches_bug = "lambda x: x * 2 if x.numel() <= 64 else x * 2.5"
    _pr(r, {"mylib/ops.py": BUGGY_OPS, "gate/scale_gate.py": spec(reference=matches_bug)})
    code, text, results = _check(r)
    assert code == 1, text
    assert _equivalence_status(results) == "failed"
    assert "spec scale_gate: reference changed by this change: review it" in text
    # and run beside the base's, the rewritten truth shows what it is: a weakened rule
    assert "this change rewrote the spec's reference, and the new one gives other results" in text
    assert "output 'out' differs by up to" in text


def test_a_rewritten_reference_alone_is_caught_by_its_results(make_repo) -> None:  # type: ignore[no-untyped-def]
    """The attack without the bug: a pull request that only loosens the truth for later. The base's
    reference judges this change (it passes), but the rewrite gives other results: it blocks."""
    r = _base(make_repo)
    _pr(r, {"gate/scale_gate.py": spec(reference="lambda x: x * 2 if x.numel() <= 64 else x * 2.5")})
    code, text, results = _check(r)
    assert code == 1, text
    rewritten = [f for res in results["results"] for f in res["findings"] if f["kind"] == "rules-weakened"]
    assert rewritten and "gives other results" in rewritten[0]["message"]


def test_an_equivalent_rewrite_of_the_reference_passes(make_repo) -> None:  # type: ignore[no-untyped-def]
    """The twin: the same truth written another way is reported for review, and does not block."""
    r = _base(make_repo)
    _pr(r, {"gate/scale_gate.py": spec(reference="lambda x: x + x")})
    code, text, results = _check(r)
    assert code == 0, text
    assert "spec scale_gate: reference changed by this change: review it" in text
    notes = [f["message"] for res in results["results"] for f in res["findings"] if f["kind"] == "reference-rewritten"]
    assert notes and "gives the same results as the base's on 4 case(s)" in notes[0], notes


def test_a_reference_that_calls_the_kernel_is_a_weakening(make_repo) -> None:  # type: ignore[no-untyped-def]
    r = _base(make_repo)
    _pr(r, {"mylib/ops.py": BUGGY_OPS, "gate/scale_gate.py": spec(reference="lambda x: scale(x.clone())")})
    code, text, results = _check(r)
    assert code == 1, text
    assert _equivalence_status(results) == "failed"
    assert ("the reference calls into the code under review ('scale' from mylib/ops.py; the candidate calls into "
            "it)") in text


def test_a_new_spec_whose_reference_calls_the_kernel_blocks(make_repo) -> None:  # type: ignore[no-untyped-def]
    r = _base(make_repo)
    new = spec(reference="lambda x: scale(x)").replace("scale_gate", "twice_gate").replace("csrc/scale.cu",
                                                                                          "csrc/twice.cu")
    _pr(r, {"csrc/twice.cu": KERNEL, "gate/twice_gate.py": new})
    code, text, _ = _check(r)
    assert code == 1, text
    assert "spec twice_gate: the reference calls into the code under review" in text


def test_a_pull_request_that_adds_a_spec_passes_and_asks_for_review(make_repo) -> None:  # type: ignore[no-untyped-def]
    r = _base(make_repo)
    new = spec().replace("scale_gate", "twice_gate").replace("csrc/scale.cu", "csrc/twice.cu")
    _pr(r, {"csrc/twice.cu": KERNEL, "gate/twice_gate.py": new})
    code, text, results = _check(r)
    assert code == 0, text
    assert "new reference, written by this change: review it (spec twice_gate)" in text
    assert "new-reference" in _kinds(results)


def test_a_pull_request_that_changes_a_signature_with_its_spec_passes(make_repo) -> None:  # type: ignore[no-untyped-def]
    r = _base(make_repo)
    _pr(r, {"mylib/ops.py": "def scale(x, *, factor):\n    return x * factor\n",
            "gate/scale_gate.py": spec(call="scale(x, factor=2.0)")})
    code, text, results = _check(r)
    assert code == 0, text
    assert ("the spec's call changed with the kernel's signature: judged by the base's spec with the head's call to "
            "the kernel; review it") in text
    assert _equivalence_status(results) == "passed"


def test_a_signature_change_with_a_rewritten_reference_blocks(make_repo) -> None:  # type: ignore[no-untyped-def]
    r = _base(make_repo)
    _pr(r, {"mylib/ops.py": "def scale(x, *, factor):\n    return x * factor * 1.25\n",
            "gate/scale_gate.py": spec(call="scale(x, factor=2.0)", reference="lambda x: x * 2.5")})
    code, text, results = _check(r)
    assert code == 1, text
    # the call alone changed with the signature: the base's truth judges, and sees the kernel wrong
    assert _equivalence_status(results) == "failed"
    assert "this change rewrote the spec's reference, and the new one gives other results" in text


def test_an_unchanged_spec_runs_the_heads_file_and_a_changed_one_the_bases(make_repo) -> None:  # type: ignore[no-untyped-def]
    r = _base(make_repo)
    _pr(r, {"gate/scale_gate.py": spec(n="gg.Dim(1, 200)")})
    plan = json.loads(gate("plan", "--base", "main", cwd=r.path).stdout)
    carried = plan["jobs"][0]["options"]["base_spec"]
    assert carried["file"] == "gate/scale_gate.py" and "gg.Dim(1, 300)" in carried["source"]
    r.checkout("main")
    r.branch("other")
    _pr(r, {"mylib/ops.py": OPS.replace("x * 2", "x + x")})
    plan = json.loads(gate("plan", "--base", "main", cwd=r.path).stdout)
    assert "base_spec" not in plan["jobs"][0]["options"]


def test_a_pull_request_that_allows_writes_into_inputs_is_a_weakening(make_repo) -> None:  # type: ignore[no-untyped-def]
    """`mutates=` lets a kernel write into its inputs: added by the change under review, it is a
    weakening (the base's spec, without it, still judges)."""
    r = _base(make_repo)
    _pr(r, {"gate/scale_gate.py": spec(extra='\n         mutates={"x": "out"},')})
    code, text, results = _check(r)
    assert code == 1, text
    assert "rules weakened by this change: spec scale_gate: inputs the kernel may now write in place (mutates=): " \
           "x -> out" in text
    assert "rules-weakened" in _kinds(results)


def test_a_pull_request_that_stops_allowing_writes_into_inputs_tightens(make_repo) -> None:  # type: ignore[no-untyped-def]
    r = _base(make_repo)
    r.git("checkout", "-q", "main")
    r.commit("declare", {"gate/scale_gate.py": spec(extra='\n         mutates={"x": "out"},')})
    r.git("checkout", "-q", "feature")
    r.git("rebase", "-q", "main")
    _pr(r, {"gate/scale_gate.py": spec()})
    code, text, results = _check(r)
    assert code == 0, text
    assert "rules tightened by this change: spec scale_gate: inputs no longer allowed to be written in place: x" \
           in text


def test_a_pull_request_that_drops_a_producer_is_a_weakening(make_repo) -> None:  # type: ignore[no-untyped-def]
    """`producer=` has the determinism check write an input with a kernel just before the call;
    dropped by the change under review, a read before the producer finished goes unchecked."""
    r = _base(make_repo)
    r.git("checkout", "-q", "main")
    r.commit("declare", {"gate/scale_gate.py": spec(extra='\n         producer=["x"],')})
    r.git("checkout", "-q", "feature")
    r.git("rebase", "-q", "main")
    _pr(r, {"gate/scale_gate.py": spec()})
    code, text, results = _check(r)
    assert code == 1, text
    assert "rules weakened by this change: spec scale_gate: inputs no longer written by a producer just before " \
           "the call (producer=): x" in text
    assert "rules-weakened" in _kinds(results)


def test_a_pull_request_that_adds_a_producer_tightens(make_repo) -> None:  # type: ignore[no-untyped-def]
    """The twin: the same spec gains `producer=`; nothing is weakened."""
    r = _base(make_repo)
    _pr(r, {"gate/scale_gate.py": spec(extra='\n         producer="x",')})
    code, text, results = _check(r)
    assert code == 0, text
    assert "rules tightened by this change: spec scale_gate: inputs now written by a producer just before the " \
           "call (producer=): x" in text
    assert "rules-weakened" not in _kinds(results)
