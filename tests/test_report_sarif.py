from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import jsonschema
import pytest

from gpu_gate.report.sarif import render_sarif
from test_report_fixtures import RMS, ROWSUM, build

SCHEMA = json.loads((Path(__file__).parent / "data" / "sarif" / "sarif-2.1.0-subset.schema.json").read_text())


@pytest.fixture()
def sarif(tmp_path: Path) -> dict[str, Any]:
    log = render_sarif(*build(tmp_path))
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


def test_finding_without_a_file_is_placed_on_its_spec(sarif: dict[str, Any]) -> None:
    [nan] = _results(sarif, "equivalence/nan")
    assert nan["locations"][0]["physicalLocation"] == {
        "artifactLocation": {"uri": "gate/rmsnorm_gate.py", "uriBaseId": "%SRCROOT%"}}


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
