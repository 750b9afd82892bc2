from __future__ import annotations

import dataclasses
import json
import re
from pathlib import Path
from typing import Any

import jsonschema
import pytest

from gpu_gate.report.sarif import FINGERPRINT_KEY, fingerprint, render_sarif
from gpu_gate.verdict import Rules, decide
from test_report_fixtures import RMS, ROWSUM, build

SCHEMA = json.loads((Path(__file__).parent.parent / "data" / "sarif" / "sarif-2.1.0-subset.schema.json").read_text())


@pytest.fixture()
def sarif(tmp_path: Path) -> dict[str, Any]:
    log = render_sarif(*build(tmp_path), root=tmp_path / "no-checkout")
    jsonschema.Draft7Validator(SCHEMA).validate(json.loads(json.dumps(log)))
    return log


def _results(log: dict[str, Any], rule_id: str) -> list[dict[str, Any]]:
    return [r for r in log["runs"][0]["results"] if r["ruleId"] == rule_id]


def test_log_names_the_schema_the_version_and_the_tool(sarif: dict[str, Any]) -> None:
    assert sarif["version"] == "2.1.0" and sarif["$schema"].endswith("sarif-2.1.0.json")
    assert sarif["runs"][0]["tool"]["driver"]["name"] == "gpu-gate"


def test_one_rule_per_finding_kind_and_results_point_at_their_rule(sarif: dict[str, Any]) -> None:
    rules = sarif["runs"][0]["tool"]["driver"]["rules"]
    ids = [r["id"] for r in rules]
    assert ids == ["plan/uncovered", "equivalence/mismatch", "equivalence/nan", "equivalence/could-not-run",
                   "memcheck/not-run", "initcheck/uninitialized"]
    assert all(r["shortDescription"]["text"] for r in rules)
    for result in sarif["runs"][0]["results"]:
        assert rules[result["ruleIndex"]]["id"] == result["ruleId"]


def test_blocking_mismatch_is_an_error_on_the_kernel_line(sarif: dict[str, Any]) -> None:
    [mismatch] = _results(sarif, "equivalence/mismatch")
    assert mismatch["level"] == "error"
    assert mismatch["message"]["text"].startswith("Tensor-likes are not close!\n\nMismatched elements: 3 / 100")
    assert "Reproduce: gpu-gate repro" in mismatch["message"]["text"]
    physical = mismatch["locations"][0]["physicalLocation"]
    assert physical == {"artifactLocation": {"uri": "csrc/rmsnorm.cu", "uriBaseId": "%SRCROOT%"},
                        "region": {"startLine": 42}}


def test_levels_follow_the_policy(sarif: dict[str, Any]) -> None:
    assert _results(sarif, "initcheck/uninitialized")[0]["level"] == "warning"  # advisory check
    assert _results(sarif, "plan/uncovered")[0]["level"] == "error"  # uncovered: fail by default
    [not_run] = _results(sarif, "memcheck/not-run")
    assert not_run["level"] == "error"
    assert not_run["message"]["text"] == "memcheck was not run: no GPU: torch.cuda.is_available() is False"
    assert not_run["locations"][0]["physicalLocation"]["artifactLocation"]["uri"] == RMS.split("::")[0]
    [timeout] = _results(sarif, "equivalence/could-not-run")
    assert timeout["locations"][0]["physicalLocation"]["artifactLocation"]["uri"] == ROWSUM.split("::")[0]


def test_without_the_sources_a_finding_with_no_line_goes_on_line_1_of_its_spec(sarif: dict[str, Any]) -> None:
    [nan] = _results(sarif, "equivalence/nan")
    assert nan["locations"][0]["physicalLocation"] == {
        "artifactLocation": {"uri": "gate/rmsnorm_gate.py", "uriBaseId": "%SRCROOT%"}, "region": {"startLine": 1}}


SPEC_SOURCE = """import torch
import gpu_gate as gg
from mylib import rmsnorm


@gg.spec(
    dims={"rows": gg.Dim(1, 64), "hidden": gg.Dim(1, 512)},
    inputs={"x": gg.Tensor(("rows", "hidden"), dtypes=["float32"]), "w": gg.Tensor(("hidden",), dtype="like:x")},
    reference=lambda x, w: x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6) * w,
)
def rmsnorm_gate(x, w):
    return rmsnorm(x, w)
"""
CUDA_SOURCE = """#include <cuda_runtime.h>

// one block per row
__global__ void rmsnorm_fwd(const float* x, const float* w, float* out, int hidden) {
}
"""
SCATTER_SOURCE = """#include <cuda_runtime.h>


__global__ void scatter_add(float* out, const int* idx, const float* src, int n) {
}
"""


@pytest.fixture()
def checkout(tmp_path: Path) -> Path:
    root = tmp_path / "checkout"
    for rel, text in (("gate/rmsnorm_gate.py", SPEC_SOURCE), ("csrc/rmsnorm.cu", CUDA_SOURCE),
                      ("csrc/scatter.cu", SCATTER_SOURCE)):
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text)
    return root


@pytest.fixture()
def placed(tmp_path: Path, checkout: Path) -> dict[str, Any]:
    log = render_sarif(*build(tmp_path), root=checkout)
    jsonschema.Draft7Validator(SCHEMA).validate(json.loads(json.dumps(log)))
    return log


def test_every_result_has_a_region_a_rule_a_level_a_message_and_a_fingerprint(placed: dict[str, Any],
                                                                               sarif: dict[str, Any]) -> None:
    for log in (placed, sarif):
        results = log["runs"][0]["results"]
        assert len(results) == 6
        for r in results:
            assert r["ruleId"] and r["level"] in ("error", "warning", "note") and r["message"]["text"]
            assert r["locations"][0]["physicalLocation"]["region"]["startLine"] >= 1, r
            assert re.fullmatch(r"[0-9a-f]{64}", r["partialFingerprints"][FINGERPRINT_KEY])


def test_finding_without_a_line_goes_on_the_spec_decorator_with_the_kernel_beside_it(placed: dict[str, Any]) -> None:
    [nan] = _results(placed, "equivalence/nan")
    assert nan["locations"][0]["physicalLocation"] == {
        "artifactLocation": {"uri": "gate/rmsnorm_gate.py", "uriBaseId": "%SRCROOT%"}, "region": {"startLine": 6}}
    [kernel] = nan["relatedLocations"]
    assert kernel["physicalLocation"]["artifactLocation"]["uri"] == "csrc/rmsnorm.cu"
    assert kernel["physicalLocation"]["region"] == {"startLine": 4}
    assert kernel["message"]["text"] == "kernel rmsnorm_fwd"


def test_job_that_did_not_run_goes_on_the_spec_decorator(placed: dict[str, Any]) -> None:
    [not_run] = _results(placed, "memcheck/not-run")
    assert not_run["locations"][0]["physicalLocation"]["region"] == {"startLine": 6}


def test_uncovered_kernel_file_goes_on_its_kernel_definition(placed: dict[str, Any]) -> None:
    [uncovered] = _results(placed, "plan/uncovered")
    physical = uncovered["locations"][0]["physicalLocation"]
    assert physical["artifactLocation"]["uri"] == "csrc/scatter.cu" and physical["region"] == {"startLine": 4}


def test_a_finding_with_its_own_line_keeps_it(placed: dict[str, Any]) -> None:
    [mismatch] = _results(placed, "equivalence/mismatch")
    assert mismatch["locations"][0]["physicalLocation"]["region"] == {"startLine": 42}
    assert "relatedLocations" not in mismatch


def _prints(log: dict[str, Any]) -> dict[str, str]:
    return {r["ruleId"]: r["partialFingerprints"][FINGERPRINT_KEY] for r in log["runs"][0]["results"]}


def test_fingerprints_survive_a_new_push_with_new_cases_seeds_numbers_and_lines(tmp_path: Path) -> None:
    record, verdict = build(tmp_path)
    first = _prints(render_sarif(record, verdict))
    for job in record.results:
        job.findings = [dataclasses.replace(
            f, case="c0099", line=(f.line + 7 if f.line else None),
            message=re.sub(r"\d+", "9", f.message), repro=(f.repro or "").replace("1234", "777")) for f in job.findings]
    assert _prints(render_sarif(record, decide(record, Rules()))) == first
    assert len(set(first.values())) == len(first), "distinct defects get distinct fingerprints"


def test_fingerprint_tells_outputs_specs_and_kinds_apart() -> None:
    base = fingerprint("equivalence", "mismatch", RMS, ["csrc/rmsnorm.cu"], "out")
    assert fingerprint("equivalence", "mismatch", RMS, ["csrc/rmsnorm.cu"], "out") == base
    assert fingerprint("equivalence", "mismatch", RMS, ["csrc/rmsnorm.cu"], "grad:x") != base
    assert fingerprint("equivalence", "mismatch", ROWSUM, ["csrc/rmsnorm.cu"], "out") != base
    assert fingerprint("equivalence", "nan", RMS, ["csrc/rmsnorm.cu"], "out") != base
    assert fingerprint("equivalence", "mismatch", RMS, ["csrc/other.cu"], "out") != base
    assert fingerprint("determinism", "mismatch", RMS, ["csrc/rmsnorm.cu"], "out") != base


def test_the_output_a_finding_names_is_in_its_fingerprint(tmp_path: Path) -> None:
    record, _ = build(tmp_path)
    job = next(r for r in record.results if r.check == "equivalence" and r.findings)
    twin = dataclasses.replace(job.findings[0], details={"output": "grad:w"})
    job.findings[0] = dataclasses.replace(job.findings[0], details={"output": "out"})
    job.findings.append(twin)
    prints = [r["partialFingerprints"][FINGERPRINT_KEY] for r in render_sarif(record, decide(record, Rules()))
              ["runs"][0]["results"] if r["ruleId"] == "equivalence/mismatch"]
    assert len(prints) == 2 and prints[0] != prints[1]


def test_uris_are_repository_relative(sarif: dict[str, Any]) -> None:
    uris = [loc["physicalLocation"]["artifactLocation"]["uri"]
            for r in sarif["runs"][0]["results"] for loc in r["locations"]]
    assert uris and not any(u.startswith(("/", "./", "file:")) for u in uris)


def test_subset_schema_rejects_what_the_oasis_schema_rejects(sarif: dict[str, Any]) -> None:
    bad = json.loads(json.dumps(sarif))
    bad["runs"][0]["results"][0]["level"] = "fatal"
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(bad, SCHEMA)
    bad = json.loads(json.dumps(sarif))
    bad["runs"][0]["results"][0]["locations"][0]["physicalLocation"]["region"] = {"startLine": 0}
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(bad, SCHEMA)


def test_a_failure_goes_first_on_the_lines_the_change_wrote(tmp_path: Path, checkout: Path) -> None:
    """The run record says which lines the change wrote in the files the spec runs: that is where
    code scanning shows the failure in the pull request's diff; the spec and kernel follow."""
    record, verdict = build(tmp_path)
    spec = next(r.spec for r in record.results if any(f.kind == "nan" for f in r.findings))
    record.changed_lines = {spec: {"csrc/rmsnorm.cu": [[3, 4]]}}
    log = render_sarif(record, verdict, root=checkout)
    jsonschema.Draft7Validator(SCHEMA).validate(json.loads(json.dumps(log)))
    [nan] = _results(log, "equivalence/nan")
    assert nan["locations"][0]["physicalLocation"] == {
        "artifactLocation": {"uri": "csrc/rmsnorm.cu", "uriBaseId": "%SRCROOT%"},
        "region": {"startLine": 3, "endLine": 4}}
    related = [(r["physicalLocation"]["artifactLocation"]["uri"], r["message"]["text"]) for r in nan["relatedLocations"]]
    assert related == [("gate/rmsnorm_gate.py", "the spec rmsnorm_gate"), ("csrc/rmsnorm.cu", "kernel rmsnorm_fwd")]


# --- notes stay out of code scanning unless the policy asks for them ---------------------------

from gpu_gate.findings import Finding, JobResult, Severity, Status  # noqa: E402
from gpu_gate.record import RunRecord  # noqa: E402

SPECS = ("gate/a_gate.py::a_gate", "gate/b_gate.py::b_gate")


def cpu_record() -> RunRecord:
    """A CPU machine's run with one real defect: every GPU-only check not run, a dtype the interpreter
    cannot verify, a differential remark, and one mismatch."""
    results = [JobResult(f"{c}:{s}", c, Status.NOT_RUN, spec=s, reason=f"no GPU on this machine: {c} needs a CUDA device")
               for s in SPECS for c in ("determinism", "memcheck", "racecheck", "synccheck", "initcheck")]
    results.append(JobResult(f"equivalence:{SPECS[0]}", "equivalence", Status.FAILED, spec=SPECS[0], findings=[
        Finding("equivalence", "mismatch", "Tensor 'out' is not close to the float64 reference", spec=SPECS[0],
                file="mylib/a.py", line=12),
        Finding("equivalence", "dtype-not-run", "bfloat16 cases not run: the Triton interpreter computes bfloat16 "
                "wrongly", severity=Severity.NOTE, spec=SPECS[0]),
        Finding("equivalence", "differential", "the base's code ran the same 24 cases", severity=Severity.NOTE,
                spec=SPECS[0])]))
    return RunRecord(base="a" * 40, head="b" * 40, results=results)


def test_code_scanning_gets_the_defect_not_twenty_notes() -> None:
    record = cpu_record()
    log = render_sarif(record, decide(record, Rules(not_run="warn")), root=Path("/nonexistent"))
    jsonschema.Draft7Validator(SCHEMA).validate(json.loads(json.dumps(log)))
    (only,) = log["runs"][0]["results"]
    assert (only["ruleId"], only["level"]) == ("equivalence/mismatch", "error")
    assert [r["id"] for r in log["runs"][0]["tool"]["driver"]["rules"]] == ["equivalence/mismatch"]
    assert only["ruleIndex"] == 0


def test_the_policy_switch_adds_the_notes_back() -> None:
    record = cpu_record()
    log = render_sarif(record, decide(record, Rules(not_run="warn")), root=Path("/nonexistent"), notes=True)
    jsonschema.Draft7Validator(SCHEMA).validate(json.loads(json.dumps(log)))
    levels = [r["level"] for r in log["runs"][0]["results"]]
    assert levels.count("error") == 1 and levels.count("note") == 12 and "warning" not in levels
    rules = log["runs"][0]["tool"]["driver"]["rules"]
    assert all(rules[r["ruleIndex"]]["id"] == r["ruleId"] for r in log["runs"][0]["results"])


def test_a_check_that_could_not_run_and_blocks_stays_an_error() -> None:
    record = cpu_record()
    log = render_sarif(record, decide(record, Rules(not_run="fail")), root=Path("/nonexistent"))
    levels = [(r["ruleId"], r["level"]) for r in log["runs"][0]["results"]]
    assert ("memcheck/not-run", "error") in levels and len(levels) == 1 + 10, "the mismatch and the ten jobs"
    assert {level for _, level in levels} == {"error"}


def test_report_writes_sarif_by_the_policys_reports_key(tmp_path: Path) -> None:
    import subprocess
    import sys

    record = cpu_record()
    record.write(tmp_path / "results.json")
    counts = {}
    for notes in (False, True):
        policy = tmp_path / f"policy-{notes}.yml"
        policy.write_text(f"version: 1\nnot_run: warn\nreports: {{sarif_notes: {str(notes).lower()}}}\n")
        out = tmp_path / f"out-{notes}"
        res = subprocess.run([sys.executable, "-m", "gpu_gate", "report", str(tmp_path / "results.json"), "--policy",
                              str(policy), "--out", str(out), "--no-github"], capture_output=True, text=True,
                             cwd=tmp_path, timeout=120)
        assert res.returncode == 1, res.stderr
        counts[notes] = len(json.loads((out / "report.sarif").read_text())["runs"][0]["results"])
    # Without the base at hand, `report` takes each verdict rule at the stricter of the policy and the
    # default preset: the ten jobs not run block (errors) either way; the switch adds the two notes.
    assert counts == {False: 11, True: 13}
