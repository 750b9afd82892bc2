"""SARIF 2.1.0 for code scanning: one result per finding, placed on the kernel source line.

Levels follow the verdict, not just the finding: a finding that blocks the merge is
``error``, one the policy lets through is ``warning``, information is ``note``. A required
job that could not run is reported on its spec file (or kernel), so the gap is visible in
the code view too. Results with no file at all (a shard that produced nothing) are left to
the check run, JUnit and the comment: code scanning needs a location to show a result.
"""
from __future__ import annotations

from typing import Any

from .. import __version__
from ..findings import Finding, JobResult, Severity, Status
from ..record import RunRecord
from ..verdict import Verdict
from . import blocking_findings, blocking_jobs, clean_text, first_line, warning_findings

SARIF_SCHEMA = "https://json.schemastore.org/sarif-2.1.0.json"
SARIF_VERSION = "2.1.0"

_DESCRIPTIONS = {
    "uncovered": "A changed kernel file that no gate spec covers",
    "parse-error": "A changed kernel or spec file that could not be parsed",
    "unrecognised-kernel": "A changed file that uses a GPU module but defines no kernel gpu-gate recognises",
    "submodule-changed": "A git submodule under the kernel globs moved: its kernels are out of sight",
    "mismatch": "Output differs from the float64 reference by more than the baseline allows",
    "nan": "NaN or Inf in the output where the reference is finite",
    "refused": "The candidate refused an input with an exception",
    "timeout": "The check did not finish within its time limit",
    "race": "A data race reported by compute-sanitizer",
    "not-run": "A check that was not run",
    "could-not-run": "A check that could not run (crash, timeout, import error)",
}


def render_sarif(record: RunRecord, verdict: Verdict) -> dict[str, Any]:
    rules: dict[str, dict[str, Any]] = {}
    results: list[dict[str, Any]] = []
    levels = _Levels(verdict)
    for f in record.plan_findings:
        _add(results, rules, _finding_result(f, levels.of_finding(f)), f.check, f.kind)
    for r in record.results:
        if r.status in (Status.NOT_RUN, Status.ERROR):
            kind = "not-run" if r.status is Status.NOT_RUN else "could-not-run"
            _add(results, rules, _job_result(r, kind, levels.of_job(r)), r.check, kind)
        for f in r.findings:
            _add(results, rules, _finding_result(f, levels.of_finding(f)), f.check, f.kind)
    driver = {"name": "gpu-gate", "version": __version__, "rules": list(rules.values())}
    return {"$schema": SARIF_SCHEMA, "version": SARIF_VERSION,
            "runs": [{"tool": {"driver": driver}, "results": results,
                      "columnKind": "unicodeCodePoints", "originalUriBaseIds": {"%SRCROOT%": {"description": {
                          "text": "The root of the repository that was checked"}}}}]}


class _Levels:
    def __init__(self, verdict: Verdict) -> None:
        self.blocking_f = blocking_findings(verdict)
        self.warning_f = warning_findings(verdict)
        self.blocking_j = blocking_jobs(verdict)

    def of_finding(self, f: Finding) -> str:
        if id(f) in self.blocking_f:
            return "error"
        if id(f) in self.warning_f:
            return "warning"
        return "note"

    def of_job(self, r: JobResult) -> str:
        return "error" if id(r) in self.blocking_j else "warning"


def _add(results: list[dict[str, Any]], rules: dict[str, dict[str, Any]], result: dict[str, Any] | None,
         check: str, kind: str) -> None:
    if result is None:
        return
    rule_id = f"{check}/{kind}"
    if rule_id not in rules:
        text = _DESCRIPTIONS.get(kind, f"gpu-gate {check} finding: {kind}")
        rules[rule_id] = {"id": rule_id, "name": _camel(rule_id), "shortDescription": {"text": text},
                          "properties": {"check": check}}
    result["ruleId"] = rule_id
    result["ruleIndex"] = list(rules).index(rule_id)
    results.append(result)


def _finding_result(f: Finding, level: str) -> dict[str, Any] | None:
    location = _location(f.file or _spec_file(f.spec), f.line if f.file else None)
    if location is None:
        return None
    text = clean_text(f.message) + (f"\n\nReproduce: {clean_text(f.repro)}" if f.repro else "")
    props = {k: v for k, v in (("spec", f.spec), ("case", f.case), ("repro", f.repro)) if v}
    if f.severity is Severity.NOTE:
        level = "note"
    return {"level": level, "message": {"text": text}, "locations": [location], "properties": props}


def _job_result(r: JobResult, kind: str, level: str) -> dict[str, Any] | None:
    location = _location(_spec_file(r.spec) or (r.kernels[0] if r.kernels else None), None)
    if location is None:
        return None
    verb = "was not run" if kind == "not-run" else "could not run"
    text = f"{r.check} {verb}: {first_line(r.reason or 'no reason given', 500)}"
    return {"level": level, "message": {"text": text}, "locations": [location],
            "properties": {k: v for k, v in (("spec", r.spec), ("level", r.level)) if v}}


def _location(path: str | None, line: int | None) -> dict[str, Any] | None:
    if not path:
        return None
    physical: dict[str, Any] = {"artifactLocation": {"uri": _uri(path), "uriBaseId": "%SRCROOT%"}}
    if line and line > 0:
        physical["region"] = {"startLine": line}
    return {"physicalLocation": physical}


def _uri(path: str) -> str:
    uri = path.replace("\\", "/")
    while uri.startswith("./"):
        uri = uri[2:]
    return uri.replace("%", "%25").replace(" ", "%20")


def _spec_file(spec: str | None) -> str | None:
    return spec.partition("::")[0] or None if spec else None


def _camel(rule_id: str) -> str:
    return "".join(p[:1].upper() + p[1:] for p in rule_id.replace("/", "-").replace("_", "-").split("-"))
