"""Terminal output: one progress line per finished job, a summary at the end, and the
GitHub Actions workflow commands (log groups, annotations) the CLI prints when
``GITHUB_ACTIONS=true``. Plain ASCII apart from what the findings themselves contain, and the ANSI
colours of verdicts and statuses when the CLI asks for them (a terminal, see gpu_gate.commands.output).
"""
from __future__ import annotations

from typing import Literal

from ..checked import case_words, gpu_only_not_run, planned
from ..findings import Finding, JobResult, Severity, Status
from ..record import RunRecord
from ..verdict import Item, Verdict, once
from . import (blocking_findings, clean_text, first_line, group_not_run, job_target, missing_items, not_run_jobs,
               reason_key, short_sha, targets_phrase, warning_findings)

_WORDS = {Status.PASSED: "PASS", Status.FAILED: "FAIL", Status.ERROR: "ERROR", Status.NOT_RUN: "NOT RUN"}
MESSAGE_LINES = 8  # lines of a multi-line message shown in the terminal summary

AnnotationLevel = Literal["error", "warning", "notice"]

# SGR codes; every painted span ends with a reset, so a cut line never leaves the terminal coloured.
_SGR = {"green": "32", "red": "31", "yellow": "33", "bold": "1"}
_STATUS_STYLE = {Status.PASSED: "green", Status.FAILED: "red", Status.ERROR: "red", Status.NOT_RUN: "yellow"}


def paint(text: str, style: str, on: bool) -> str:
    """``text`` in ``style`` ("red", "bold red", ...) when ``on``, else unchanged."""
    if not on or not text:
        return text
    codes = ";".join(_SGR[s] for s in style.split())
    return f"\033[{codes}m{text}\033[0m"


def status_word(status: Status, colour: bool = False) -> str:
    """PASS/FAIL/ERROR/NOT RUN, padded to one width (before painting, so columns line up)."""
    return paint(f"{_WORDS[status]:<7}", _STATUS_STYLE[status], colour)


def paint_headline(headline: str, colour: bool) -> str:
    """The verdict line with its PASSED/FAILED word coloured."""
    for word, style in (("PASSED", "bold green"), ("FAILED", "bold red")):
        if f": {word}" in headline:
            return headline.replace(word, paint(word, style, colour), 1)
    return headline


def progress_line(result: JobResult, done: int, total: int, elapsed_s: float, colour: bool = False,
                  said: dict[str, int] | None = None) -> str:
    """One finished job. ``said``: the reasons already given for jobs that did not run, by the number of
    the line that gave each (kept by the caller across the run), so that a reason is said once."""
    width = len(str(total))
    check = result.check + (" (advisory)" if result.level != "required" else "")
    outcome = _outcome(result)
    if said is not None and result.status in (Status.NOT_RUN, Status.ERROR):
        first = said.setdefault(f"{result.status.value}:{reason_key(result)}", done)
        if first != done:
            outcome = f"the same reason as [{first:>{width}}/{total}]"
    return (f"[{done:>{width}}/{total}] {status_word(result.status, colour)} {check} {job_target(result)}  "
            f"{outcome}  {result.duration_s:.1f}s  (elapsed {elapsed_s:.1f}s)")


def job_details(result: JobResult) -> list[str]:
    """What ``-v`` adds under a job's progress line: its kernels, seed, and every finding it
    returned (notes included), each with its place, case and reproducer."""
    lines = []
    if result.kernels:
        lines.append(f"      kernels: {', '.join(result.kernels)}")
    seed = result.extra.seed
    if seed is not None:
        lines.append(f"      seed: {seed}")
    for f in result.findings:
        text = [ln.rstrip() for ln in clean_text(f.message).strip().split("\n") if ln.strip()] or [""]
        lines.append(f"      {f.severity.value} {f.kind}: {text[0]}")
        lines += [f"        {ln}" for ln in text[1:]]
        where = [p for p in (f.location, f"case {f.case}" if f.case else None) if p]
        if where:
            lines.append(f"        at {', '.join(where)}")
        if f.repro:
            lines.append(f"        repro: {clean_text(f.repro)}")
    if result.log_tail and result.status in (Status.ERROR, Status.NOT_RUN):
        tail = clean_text(result.log_tail).strip().splitlines()[-MESSAGE_LINES:]
        lines += ["      log tail:"] + [f"        {ln}" for ln in tail]
    return lines


def _outcome(r: JobResult) -> str:
    if r.status in (Status.NOT_RUN, Status.ERROR):
        return first_line(r.reason or "no reason given", 120)
    parts = []
    if r.errors:
        parts.append(f"{len(r.errors)} error{'s' * (len(r.errors) != 1)}")
    if r.cases or planned(r):
        parts.append(case_words(r))
    if r.cached_from:
        parts.append(f"cached from {short_sha(r.cached_from)}")
    return ", ".join(parts) or "ok"


def render_summary(record: RunRecord, verdict: Verdict, *, colour: bool = False, full: bool = False) -> str:
    """The verdict line, then what blocks, what did not run and what warns. ``full``: whole
    messages (``-v``) instead of their first lines."""
    lines = [paint_headline(verdict.headline, colour)]
    # the rest are listed as not run; a finding several jobs made at one place, once (see verdict.same_place)
    blockers = [i for i in once(verdict.blocking) if i.finding is not None]
    if blockers:
        lines += ["", paint("Blocking:", "red", colour)]
        for item in blockers:
            lines += _item_lines(item, None if full else MESSAGE_LINES)
    if not_run_jobs(record.results) or missing_items(verdict):
        lines += ["", "Not run, and why:"]
        blocking = {id(i.job) for i in verdict.blocking if i.job is not None}
        for (verb, reason, blocks), jobs in group_not_run(record.results, blocking).items():
            impact = "blocks the merge" if blocks else "does not block"
            impact += "; GPU-only, not run here" if not blocks and all(gpu_only_not_run(r) for r in jobs) else ""
            lines.append(f"  - {targets_phrase(jobs)}: {verb}: {first_line(reason, 300)} ({impact})")
        lines += [f"  - {first_line(i.reason, 300)} (blocks the merge)" for i in missing_items(verdict)]
    warned = [i for i in verdict.warnings if i.finding is not None]
    if warned:
        lines += ["", f"Warnings ({len(warned)}, do not block the merge):"]
        lines += [f"  - {_label(i.finding)}: {first_line(i.reason, 200)}" for i in warned if i.finding]
    return "\n".join(lines) + "\n"


def _item_lines(item: Item, limit: int | None = MESSAGE_LINES) -> list[str]:
    f = item.finding
    if f is None:
        return [f"  - {first_line(item.reason, 300)}"]
    message = [ln.rstrip() for ln in clean_text(f.message).strip().split("\n") if ln.strip()]
    cut = limit is not None and len(message) > limit
    shown = message[:limit] + [f"... ({len(message) - (limit or 0)} more lines; -v shows them)"] if cut else message
    lines = [f"  - {_label(f)}: {shown[0]}"] + [f"      {ln}" for ln in shown[1:]]
    where = [p for p in (f.location, f"case {f.case}" if f.case else None) if p]
    if where:
        lines.append(f"      at {', '.join(where)}")
    if f.repro:
        lines.append(f"      repro: {clean_text(f.repro)}")
    return lines


def _label(f: Finding) -> str:
    return f"{f.check} {f.kind}" + (f" {f.spec}" if f.spec else "")


# --- GitHub Actions workflow commands -----------------------------------------------

def gha_group(title: str) -> tuple[str, str]:
    return f"::group::{_escape_data(title)}", "::endgroup::"


def gha_annotation(finding: Finding, level: AnnotationLevel | None = None) -> str:
    """``::error file=...,line=...,title=...::message``; the level follows severity unless given."""
    level = level or _level(finding.severity)
    props = []
    if finding.file:
        props.append(f"file={_escape_property(finding.file)}")
        if finding.line:
            props.append(f"line={finding.line}")
    title = f"gpu-gate {finding.check}: {finding.kind}" + (f" ({finding.spec})" if finding.spec else "")
    props.append(f"title={_escape_property(title)}")
    message = clean_text(finding.message).strip()
    if finding.repro:
        message += f"\nReproduce: {clean_text(finding.repro)}"
    return f"::{level} {','.join(props)}::{_escape_data(message)}"


def gha_annotations(record: RunRecord, verdict: Verdict) -> list[str]:
    """Annotations for every finding that blocks (error) or warns (warning), in report order."""
    blocking, warned = blocking_findings(verdict), warning_findings(verdict)
    findings = list(record.plan_findings) + [f for r in record.results for f in r.findings]
    out = []
    for f in findings:
        if id(f) in blocking:
            out.append(gha_annotation(f, "error"))
        elif id(f) in warned:
            out.append(gha_annotation(f, "warning"))
    return out


_LEVELS: dict[Severity, AnnotationLevel] = {Severity.ERROR: "error", Severity.WARNING: "warning",
                                            Severity.NOTE: "notice"}


def _level(severity: Severity) -> AnnotationLevel:
    return _LEVELS[severity]


def _escape_data(text: str) -> str:
    return text.replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A")


def _escape_property(text: str) -> str:
    return _escape_data(clean_text(text)).replace(":", "%3A").replace(",", "%2C")
