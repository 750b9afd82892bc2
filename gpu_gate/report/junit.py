"""JUnit XML: one <testsuite> per check, one <testcase> per job, plus a "plan" suite.

How gpu-gate maps onto JUnit, chosen for what EnricoMi/publish-unit-test-result-action,
dorny/test-reporter and mikepenz/action-junit-report show:

- suite name and classname = the check; testcase name = spec id, or the kernel path for
  kernel-scoped checks. Names never change with the outcome, so history and
  "new failing test" comparisons stay stable;
- FAILED with a blocking finding -> <failure>, message = first line, text = every error
  finding (full multi-line message, file:line, case, reproducer); the testcase carries
  file/line attributes so the consumers can annotate the kernel source line;
- ERROR -> <error> with the reason and the subprocess's log tail;
- NOT_RUN -> <skipped message="reason">; when the policy fails closed the message says
  that it blocks the merge, because a skip alone would read as harmless;
- advisory failures and other non-blocking findings -> a passing testcase whose
  <system-out> starts with "WARNING (advisory, does not block the merge)". A <failure>
  would paint the test red in all three consumers while the gate itself is green;
- an advisory check that could not run -> <skipped>, since nothing was verified.
Plan-level findings (uncovered kernels, files that do not parse) and planned jobs that
produced no result are testcases of the "plan" suite.
"""
from __future__ import annotations

import xml.etree.ElementTree as ET

from junit_xml import TestCase, TestSuite

from ..findings import Finding, JobResult, Status
from ..record import RunRecord
from ..verdict import Verdict
from . import (blocking_findings, blocking_jobs, check_order, clean_text, first_line, job_target,
               missing_items, short_sha, warning_findings)

PLAN_SUITE = "plan"
ADVISORY_BANNER = "WARNING (advisory, does not block the merge)"


def render_junit(record: RunRecord, verdict: Verdict) -> str:
    suites = _plan_suite(record, verdict) + _check_suites(record, verdict)
    root = ET.Element("testsuites", {"name": "gpu-gate"})
    totals = dict.fromkeys(("tests", "failures", "errors", "skipped"), 0)
    seconds = 0.0
    for suite in suites:
        element = suite.build_xml_doc()
        element.set("time", f"{float(element.get('time', '0')):.3f}")  # str(float) may be 1e-05
        for key in totals:
            totals[key] += int(element.get(key, "0"))
        seconds += float(element.get("time", "0"))
        root.append(element)
    for key, value in totals.items():
        root.set(key, str(value))
    root.set("time", f"{seconds:.3f}")
    _scrub(root)
    ET.indent(root)
    return '<?xml version="1.0" encoding="utf-8"?>\n' + ET.tostring(root, encoding="unicode") + "\n"


def _scrub(root: ET.Element) -> None:
    """Make every attribute and text XML 1.0-legal, whatever a kernel or a spec name contained."""
    for element in root.iter():
        for key, value in element.attrib.items():
            element.set(key, clean_text(value))
        if element.text:
            element.text = clean_text(element.text)


def _plan_suite(record: RunRecord, verdict: Verdict) -> list[TestSuite]:
    blocking = blocking_findings(verdict)
    cases = [_plan_case(f, id(f) in blocking) for f in record.plan_findings]
    for item in missing_items(verdict):
        case = TestCase(_missing_job_id(item.reason), classname=PLAN_SUITE)
        case.add_error_info(message=first_line(item.reason), output=clean_text(item.reason),
                            error_type="missing-result")
        cases.append(case)
    return [TestSuite(PLAN_SUITE, cases)] if cases else []


def _missing_job_id(reason: str) -> str:
    # verdict phrases these as "job <id> produced no result (...)"
    head, _, rest = reason.partition(" ")
    return rest.split(" ", 1)[0] if head == "job" and rest else first_line(reason)


def _plan_case(finding: Finding, blocks: bool) -> TestCase:
    name = f"{finding.kind}: {finding.file or finding.spec or finding.message.splitlines()[0]}"
    case = TestCase(name, classname=PLAN_SUITE, file=finding.file, line=_line(finding))
    if blocks:
        case.add_failure_info(message=first_line(finding.message), output=_finding_text(finding),
                              failure_type=finding.kind)
    else:
        case.stdout = f"{ADVISORY_BANNER}\n{_finding_text(finding)}"
    return case


def _check_suites(record: RunRecord, verdict: Verdict) -> list[TestSuite]:
    by_check: dict[str, list[JobResult]] = {}
    for r in record.results:
        by_check.setdefault(r.check, []).append(r)
    return [TestSuite(check, [_job_case(r, verdict) for r in by_check[check]])
            for check in check_order(by_check)]


def _job_case(r: JobResult, verdict: Verdict) -> TestCase:
    blocks = id(r) in blocking_jobs(verdict)
    block_f = blocking_findings(verdict)
    failing = [f for f in r.findings if id(f) in block_f]
    located = next((f for f in failing + r.errors if f.file), None)
    case = TestCase(job_target(r), classname=r.check, elapsed_sec=r.duration_s or None,
                    file=located.file if located else None, line=_line(located))
    # Exactly one outcome element per testcase, so each consumer counts the job once.
    if r.status is Status.ERROR and blocks:
        case.add_error_info(message=first_line(f"could not run: {r.reason or 'no reason given'}"),
                            output=_log(r, r.errors), error_type="error")
    elif r.status in (Status.NOT_RUN, Status.ERROR):
        case.add_skipped_info(message=_skip_message(r, blocks), output=_log(r, r.errors))
    elif failing:
        case.add_failure_info(message=_failure_message(failing), output=_findings_text(r, failing),
                              failure_type=failing[0].kind)
    case.stdout = _stdout(r, verdict) or None
    if r.log_tail and r.status is not Status.ERROR and not case.is_skipped():
        case.stderr = clean_text(r.log_tail)
    return case


def _skip_message(r: JobResult, blocks: bool) -> str:
    verb = "not run" if r.status is Status.NOT_RUN else "could not run"
    impact = "blocks the merge (required check, fail closed)" if blocks else "does not block the merge"
    return first_line(f"{verb}: {r.reason or 'no reason given'} - {impact}", limit=400)


def _failure_message(failing: list[Finding]) -> str:
    f = failing[0]
    where = (f" in case {f.case}" if f.case else "") + (f" at {f.location}" if f.location else "")
    head = f"{f.kind}{where}: {first_line(f.message, limit=300)}"
    return head if len(failing) == 1 else f"{len(failing)} errors; first: {head}"


def _findings_text(r: JobResult, failing: list[Finding]) -> str:
    errors = failing + [f for f in r.errors if f not in failing]
    return "\n\n".join(_finding_text(f) for f in errors)


def _finding_text(f: Finding) -> str:
    where = [p for p in (f.location, f"case {f.case}" if f.case else None) if p]
    lines = [f"[{f.check}/{f.kind}]" + (f" {' '.join(where)}" if where else ""), clean_text(f.message)]
    if f.repro:
        lines.append(f"reproduce: {clean_text(f.repro)}")
    return "\n".join(lines)


def _stdout(r: JobResult, verdict: Verdict) -> str:
    warned = warning_findings(verdict)
    parts = [f"cached from {short_sha(r.cached_from)}"] if r.cached_from else []
    if r.cases:
        parts.append(f"{r.cases} cases")
    warnings = [f for f in r.findings if id(f) in warned]
    if warnings:
        parts.append(ADVISORY_BANNER)
        parts.extend(_finding_text(f) for f in warnings)
    return "\n".join(parts)


def _log(r: JobResult, findings: list[Finding]) -> str:
    parts = [f"reason: {clean_text(r.reason or 'no reason given')}"]
    parts.extend(_finding_text(f) for f in findings)
    if r.log_tail:
        parts.append(f"--- log tail ---\n{clean_text(r.log_tail)}")
    return "\n\n".join(parts)


def _line(finding: Finding | None) -> str | None:
    return str(finding.line) if finding is not None and finding.line else None
