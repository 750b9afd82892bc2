from __future__ import annotations

from pathlib import Path

import pytest
from lxml import etree

from gpu_gate.findings import Finding, JobResult, Status
from gpu_gate.record import ChangedKernel, RunRecord
from gpu_gate.report.junit import render_junit
from gpu_gate.verdict import Rules, decide
from test_report_fixtures import LOG_TAIL, MISMATCH, NO_GPU, REPRO, RMS, ROWSUM, build

XSD = etree.XMLSchema(etree.parse(str(Path(__file__).parent.parent / "data" / "junit" / "junit.xsd")))


def _parse(xml: str) -> etree._Element:
    root = etree.fromstring(xml.encode("utf-8"))
    XSD.assertValid(root)
    return root


def _case(root: etree._Element, classname: str, name: str) -> etree._Element:
    found = root.xpath("//testcase[@classname=$c and @name=$n]", c=classname, n=name)
    assert len(found) == 1, (classname, name)
    return found[0]


@pytest.fixture()
def junit(tmp_path: Path) -> etree._Element:
    return _parse(render_junit(*build(tmp_path)))


def test_output_is_valid_against_the_junit_schema_and_counts_match(junit: etree._Element) -> None:
    for suite in junit.iter("testsuite"):
        cases = suite.findall("testcase")
        assert int(suite.get("tests")) == len(cases)
        for outcome, attr in (("failure", "failures"), ("error", "errors"), ("skipped", "skipped")):
            assert int(suite.get(attr)) == sum(c.find(outcome) is not None for c in cases), (suite.get("name"), attr)
    assert int(junit.get("tests")) == len(junit.findall(".//testcase")) == 8
    assert (junit.get("failures"), junit.get("errors"), junit.get("skipped")) == ("2", "2", "1")
    assert all(len(c.xpath("failure|error|skipped")) <= 1 for c in junit.iter("testcase"))


def test_one_suite_per_check_in_registry_order_after_the_plan(junit: etree._Element) -> None:
    names = [s.get("name") for s in junit.findall("testsuite")]
    assert names == ["plan", "compile", "equivalence", "memcheck", "racecheck", "initcheck"]


def test_failed_equivalence_carries_every_error_finding_and_its_reproducer(junit: etree._Element) -> None:
    case = _case(junit, "equivalence", RMS)
    failure = case.find("failure")
    assert failure.get("message") == "2 errors; first: mismatch in case c0017 at csrc/rmsnorm.cu:42: " \
                                     "Mismatched elements: 3 / 100 (3.0%)"
    assert MISMATCH in failure.text  # multi-line assert_close text, verbatim
    assert REPRO in failure.text and REPRO.replace("c0017", "c0031") in failure.text
    assert "NaN in output where the reference is finite" in failure.text
    assert (case.get("file"), case.get("line"), case.get("time")) == ("csrc/rmsnorm.cu", "42", "4.100000")


def test_not_run_is_skipped_with_its_reason_and_says_it_blocks(junit: etree._Element) -> None:
    skipped = _case(junit, "memcheck", RMS).find("skipped")
    assert skipped.get("message") == f"not run: {NO_GPU} - blocks the merge (required check, fail closed)"


def test_timeout_is_an_error_with_a_clean_log_tail(junit: etree._Element) -> None:
    error = _case(junit, "equivalence", ROWSUM).find("error")
    assert error.get("message") == "could not run: timed out after 600 s (process group killed)"
    assert "Kernel hung waiting on barrier\\x00\\x07" in error.text  # visible, not raw
    assert "\x1b" not in error.text and "[31m" not in error.text
    assert "TimeoutError" in error.text and LOG_TAIL.splitlines()[0] in error.text


def test_advisory_failure_passes_with_a_warning_in_system_out(junit: etree._Element) -> None:
    case = _case(junit, "initcheck", RMS)
    assert case.xpath("failure|error|skipped") == []
    out = case.find("system-out").text
    assert out.startswith("4 cases\nWARNING (advisory, does not block the merge)")
    assert "csrc/rmsnorm.cu:57" in out and "Uninitialized __global__ memory read" in out


def test_plan_findings_and_missing_shard_results_are_testcases(junit: etree._Element) -> None:
    uncovered = _case(junit, "plan", "uncovered: csrc/scatter.cu")
    assert uncovered.find("failure").get("message") == "csrc/scatter.cu changed and no gate spec covers it"
    missing = _case(junit, "plan", f"synccheck:{ROWSUM}")
    assert "produced no result" in missing.find("error").get("message")


def test_cached_result_says_where_it_came_from(junit: etree._Element) -> None:
    assert "cached from 4f2a9c1d0b7e" in _case(junit, "racecheck", RMS).find("system-out").text


def test_control_characters_anywhere_still_give_well_formed_xml(tmp_path: Path) -> None:
    spec = "gate/w\x1b[1meird_gate.py::k\x0c"
    record = RunRecord(results=[JobResult("j", "equivalence", Status.FAILED, spec=spec, findings=[
        Finding("equivalence", "mismatch", "bad\x00value \x1b[31mred\x1b[0m <tag> & \"q\"\nline2\ud800", spec=spec)])])
    root = _parse(render_junit(record, decide(record, Rules())))
    case = root.find(".//testcase")
    assert case.get("name") == "gate/weird_gate.py::k\\x0c"
    assert case.find("failure").get("message") == "mismatch: bad\\x00value red <tag> & \"q\""
    assert case.find("failure").text.endswith("line2\\xd800")


def test_advisory_job_that_could_not_run_is_skipped_not_an_error(tmp_path: Path) -> None:
    record = RunRecord(kernels=[ChangedKernel("k.cu", "cuda", "added")], results=[
        JobResult("j", "racecheck", Status.ERROR, level="advisory", spec="g.py::k", reason="compute-sanitizer crashed")])
    case = _parse(render_junit(record, decide(record, Rules()))).find(".//testcase")
    assert case.find("error") is None
    assert case.find("skipped").get("message") == "could not run: compute-sanitizer crashed - does not block the merge"


def test_no_kernel_changes_gives_an_empty_but_valid_report() -> None:
    record = RunRecord()
    root = _parse(render_junit(record, decide(record, Rules())))
    assert root.get("tests") == "0" and root.findall("testsuite") == []


def test_schema_rejects_a_testcase_without_a_name() -> None:
    bad = '<testsuites><testsuite name="s" tests="1"><testcase classname="c"/></testsuite></testsuites>'
    assert not XSD.validate(etree.fromstring(bad))
