"""SARIF 2.1.0 for code scanning: one result per finding, placed on the kernel source line.

Levels follow the verdict, not just the finding: a finding that blocks the merge is
``error``, one the policy lets through is ``warning``, information is ``note``. Code scanning keeps
every result as an alert, so notes (a check not run on this machine, a dtype not verified, the
differential run's remarks) are left out unless the policy says ``reports: {sarif_notes: true}``:
twenty alerts for one defect hide the defect. Every result
has a region: its own line, else (an equivalence failure, a required job that could not run)
the spec's decorator with the judged kernels' definitions as related locations, as the check
run's annotations place them (:mod:`.locate`), else line 1 of the spec or kernel file.
Results with no file at all (a shard that produced nothing) are left to the check run, JUnit
and the comment: code scanning needs a location to show a result.

Each result carries a partial fingerprint of what the defect is (check, kind, spec, kernel
files, the output or input named), never of the case, the seed or the line, so that code
scanning keeps one alert for one defect across pushes.
"""
from __future__ import annotations

import hashlib
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import cast

from .. import __version__
from ..findings import Finding, JobResult, Severity, Status
from ..record import RunRecord
from ..verdict import Verdict
from . import blocking_findings, blocking_jobs, clean_text, first_line, locate, warning_findings

SARIF_SCHEMA = "https://json.schemastore.org/sarif-2.1.0.json"
SARIF_VERSION = "2.1.0"
FINGERPRINT_KEY = "gpuGateFinding/v1"

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


def render_sarif(record: RunRecord, verdict: Verdict, root: Path | None = None, *,
                 notes: bool = False) -> dict[str, object]:
    """The SARIF log; sources under ``root`` (default: the working directory) place findings with no
    line. ``notes``: keep the results of level ``note`` too (the policy's ``reports.sarif_notes``)."""
    rules: dict[str, dict[str, object]] = {}
    results: list[dict[str, object]] = []
    levels = _Levels(verdict)
    here = root or Path.cwd()
    for f in record.plan_findings:
        _add(results, rules, _finding_result(f, levels.of_finding(f), (), here), f.check, f.kind)
    for r in record.results:
        job_places = _placed(here, r.spec, r.kernels, record.changed_lines.get(r.spec or "", {}),
                             record.places.get(r.job_id))
        if r.status in (Status.NOT_RUN, Status.ERROR):
            kind = "not-run" if r.status is Status.NOT_RUN else "could-not-run"
            _add(results, rules, _job_result(r, kind, levels.of_job(r), job_places), r.check, kind)
        for f in r.findings:
            found = job_places if f.spec in (None, r.spec) else _placed(here, f.spec, r.kernels)
            _add(results, rules, _finding_result(f, levels.of_finding(f), r.kernels, here, found), f.check, f.kind)
    if not notes:
        results, rules = _without_notes(results, rules)
    driver = {"name": "gpu-gate", "version": __version__, "rules": list(rules.values())}
    return {"$schema": SARIF_SCHEMA, "version": SARIF_VERSION,
            "runs": [{"tool": {"driver": driver}, "results": results,
                      "columnKind": "unicodeCodePoints", "originalUriBaseIds": {"%SRCROOT%": {"description": {
                          "text": "The root of the repository that was checked"}}}}]}


def _without_notes(results: list[dict[str, object]], rules: dict[str, dict[str, object]]
                   ) -> tuple[list[dict[str, object]], dict[str, dict[str, object]]]:
    """What blocks and what warns, and only the rules those results name (re-indexed)."""
    kept = [r for r in results if r["level"] != "note"]
    used = {r["ruleId"] for r in kept}
    rules = {k: v for k, v in rules.items() if k in used}
    for r in kept:
        r["ruleIndex"] = list(rules).index(cast(str, r["ruleId"]))  # _add sets it, a str
    return kept, rules


def fingerprint(check: str, kind: str, spec: str | None, kernels: Iterable[str], subject: str | None) -> str:
    """The same defect on every push: check, kind, spec, kernel files and the output or input named.

    Never the case id, the seed, the numbers in the message or the line: those change from run
    to run (new random cases, an edit above the kernel) while the defect stays the same.
    """
    parts = [check, kind, spec or "", "\n".join(sorted(set(kernels))), subject or ""]
    return hashlib.sha256("\0".join(parts).encode("utf-8")).hexdigest()


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
        """A job that did not run says nothing of the code: an error when it blocks, else a note."""
        return "error" if id(r) in self.blocking_j else "note"


def _add(results: list[dict[str, object]], rules: dict[str, dict[str, object]], result: dict[str, object] | None,
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


def _finding_result(f: Finding, level: str, job_kernels: tuple[str, ...], root: Path,
                    job_places: list[locate.Place] | None = None) -> dict[str, object] | None:
    if f.file:
        line = f.line if f.line and f.line > 0 else _first_kernel_line(root, f.file)
        found = [locate.Place(f.file, line, "")]
    else:
        found = job_places if job_places is not None else _placed(root, f.spec, job_kernels)
    if not found:
        return None
    text = clean_text(f.message) + (f"\n\nReproduce: {clean_text(f.repro)}" if f.repro else "")
    props = {k: v for k, v in (("spec", f.spec), ("case", f.case), ("repro", f.repro)) if v}
    if f.severity is Severity.NOTE:
        level = "note"
    kernels = job_kernels or ((f.file,) if f.file else ())
    subject = f.details.get("output") or f.details.get("input")
    return _result(level, text, found, props, fingerprint(f.check, f.kind, f.spec, kernels,
                                                          str(subject) if subject else None))


def _job_result(r: JobResult, kind: str, level: str, found: list[locate.Place]) -> dict[str, object] | None:
    if not found:
        return None
    verb = "was not run" if kind == "not-run" else "could not run"
    text = f"{r.check} {verb}: {first_line(r.reason or 'no reason given', 500)}"
    props = {k: v for k, v in (("spec", r.spec), ("level", r.level)) if v}
    return _result(level, text, found, props, fingerprint(r.check, kind, r.spec, r.kernels, None))


def _result(level: str, text: str, found: list[locate.Place], props: Mapping[str, object],
            print_: str) -> dict[str, object]:
    result: dict[str, object] = {"level": level, "message": {"text": text}, "locations": [_location(found[0])],
                                 "partialFingerprints": {FINGERPRINT_KEY: print_}, "properties": props}
    if len(found) > 1:
        result["relatedLocations"] = [{**_location(p), "id": i, "message": {"text": p.what}}
                                      for i, p in enumerate(found[1:], start=1)]
    return result


def _placed(root: Path, spec: str | None, kernels: tuple[str, ...],
            changed: dict[str, list[list[int]]] | None = None,
            kept: list[dict[str, object]] | None = None) -> list[locate.Place]:
    """The lines the change wrote in the files the spec runs, the spec's decorator and the kernels'
    definitions (as recorded when the job ran, in ``kept``, else read under ``root``); failing
    those, line 1 of the spec or kernel file."""
    found = locate.job_places(root, kept, spec, kernels, changed)
    if found:
        return found
    path = _spec_file(spec) or (kernels[0] if kernels else None)
    return [locate.Place(path, 1, "")] if path else []


def _first_kernel_line(root: Path, path: str) -> int:
    """A finding about a whole kernel file (uncovered) goes on its first kernel's definition, else line 1."""
    lines = locate.kernel_lines(root, path)
    return lines[0][1] if lines else 1


def _location(place: locate.Place) -> dict[str, object]:
    region = {"startLine": max(place.line, 1)}
    if place.end is not None and place.end > place.line:
        region["endLine"] = place.end
    return {"physicalLocation": {"artifactLocation": {"uri": _uri(place.path), "uriBaseId": "%SRCROOT%"},
                                 "region": region}}


def _uri(path: str) -> str:
    uri = path.replace("\\", "/")
    while uri.startswith("./"):
        uri = uri[2:]
    return uri.replace("%", "%25").replace(" ", "%20")


def _spec_file(spec: str | None) -> str | None:
    return spec.partition("::")[0] or None if spec else None


def _camel(rule_id: str) -> str:
    return "".join(p[:1].upper() + p[1:] for p in rule_id.replace("/", "-").replace("_", "-").split("-"))
