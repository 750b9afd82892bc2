"""The Markdown report: the sticky PR comment and ``$GITHUB_STEP_SUMMARY``.

Layout, most important first: verdict line, what blocks, one table per changed kernel,
failure details (messages verbatim in code blocks, reproducers, each collapsed), what was
not verified and why (checks not run and dtypes dropped, each reason once with the jobs it
covers), the error-growth curve of a job whose growth finding it explains, compile
resources, why each spec ran, advisory warnings, and a link to the full report.

With ``max_chars`` (65,536 for a PR comment) the report is fitted by whole blocks, so a
cut never falls inside a code fence, a table or a character: the verdict, the blocking
list and the kernel tables come first, details are shortened and dropped from the end,
and a last line says where the full report is. Lengths are counted in characters
(code points), as GitHub counts the comment limit.
"""
from __future__ import annotations

import dataclasses
import re
from collections.abc import Iterable

from ..checked import case_words, planned
from ..findings import Finding, JobResult, Severity, Status
from ..judge.checks import check_info
from ..record import ChangedKernel, RunRecord
from ..verdict import Item, Verdict, once
from . import (blocking_findings, blocking_jobs, check_order, clean_text, first_line, group_not_run, job_target,
               missing_items, reason_key, short_sha)
from .mdfit import Section as _Section, assemble as _assemble, fit as _fit
from .mdgrowth import growth_blocks, resource_blocks
from .mdtext import _shorten, _tail, code, details, escape, fence

SHORT_MESSAGE_CHARS = 1500  # per message once the report has to be shortened
SHORT_LOG_LINES = 15
FULL_LOG_LINES = 60


# --- Result vocabulary --------------------------------------------------------------

def _badge(r: JobResult, blocks: bool) -> str:
    advisory = "" if r.level == "required" else " (advisory)"
    if r.status is Status.PASSED:
        warnings = sum(f.severity is Severity.WARNING for f in r.findings)
        text = "✅ passed" + (f" ({warnings} warning{'s' * (warnings != 1)})" if warnings else "")
    elif r.status is Status.FAILED:
        text = "❌ failed" if blocks else "⚠️ failed"
        text += f" ({len(r.errors)} error{'s' * (len(r.errors) != 1)})" if r.errors else ""
    elif r.status is Status.ERROR:
        text = ("💥" if blocks else "⚠️") + " could not run"
    else:
        text = ("⛔" if blocks else "⏭️") + " not run"
    cached = f" · cached from {code(short_sha(r.cached_from))}" if r.cached_from else ""
    return text + advisory + cached


def _duration(seconds: float) -> str:
    return f"{seconds:.1f}s" if seconds else ""


# --- Sections -----------------------------------------------------------------------

@dataclasses.dataclass(frozen=True)
class _Ctx:
    record: RunRecord
    verdict: Verdict
    blocking_jobs: set[int]
    blocking_findings: set[int]
    message_limit: int | None
    log_lines: int


def render_markdown(record: RunRecord, verdict: Verdict, *, max_chars: int | None = None,
                    artifact_url: str | None = None) -> str:
    """The report; with ``artifact_url`` (where the run keeps the report artifact) it ends with a link to it."""
    link = f"---\nFull report: {artifact_url}" if artifact_url else ""
    full = _assemble(_sections(_ctx(record, verdict, shortened=False)), None, link)
    if max_chars is None or len(full) <= max_chars:
        return full
    sections = _sections(_ctx(record, verdict, shortened=True))
    footer = link or ("---\nThe full report (report.md, junit.xml, report.sarif, results.json) "
                      "is in this run's job artifacts.")
    return _fit(sections, footer, max_chars)


def _ctx(record: RunRecord, verdict: Verdict, *, shortened: bool) -> _Ctx:
    return _Ctx(record, verdict, blocking_jobs(verdict), blocking_findings(verdict),
                SHORT_MESSAGE_CHARS if shortened else None,
                SHORT_LOG_LINES if shortened else FULL_LOG_LINES)


def _sections(ctx: _Ctx) -> list[_Section]:
    return [
        _Section(None, [_verdict_block(ctx)], essential=True),
        _Section("### Blocking", _blocking_lines(ctx.verdict.blocking),
                 essential=True, joiner="\n", omitted="more blocking reasons not shown", capped=True),
        _Section("### Kernels", _kernel_blocks(ctx), essential=True, omitted="more kernels not shown"),
        _Section("### Failure details", _detail_blocks(ctx), omitted="more failure details not shown"),
        _Section("### Not verified, and why", _unverified_blocks(ctx), essential=True, joiner="\n",
                 omitted="more reasons for checks or dtypes not verified are not shown", capped=True),
        _Section("### Error growth with size", growth_blocks(ctx.record.results, ctx.verdict)),
        _Section("### Compile resources", resource_blocks(ctx.record.results)),
        _Section("### Speed: this change against the base", _speed_blocks(ctx)),
        _Section("### Specs run, and why", _collapsed("why each spec ran", _selection_lines(ctx))),
        _Section("### Warnings (do not block the merge)", _warning_blocks(ctx), omitted="more warnings not shown"),
        _Section("### Pre-existing failures (the base's code fails them too)", _debt_blocks(ctx),
                 omitted="more pre-existing failures not shown"),
        _Section("### Fixed by this change", _fixed_lines(ctx), joiner="\n", omitted="more fixes not shown",
                 capped=True),
    ]


# --- Differential runs: the repository's debt, and what this change fixed --------------

def _changes(ctx: _Ctx, change: str) -> list[tuple[JobResult, Finding]]:
    return [(r, f) for r in ctx.record.results for f in r.findings if f.details.get("change") == change]


def _debt_blocks(ctx: _Ctx) -> list[str]:
    """Failures the base's code has on the same cases: not this change's doing, collapsed. They
    block only where the base's policy says `preexisting: fail` (then they are under Blocking too)."""
    items = [(r, f) for r, f in _changes(ctx, "pre-existing") if f.severity is not Severity.NOTE]
    if not items:
        return []
    blocks = _blocking_findings_of(ctx)
    lines = []
    for r, f in items:
        tag = " (blocks: `preexisting: fail`)" if id(f) in blocks else ""
        target = f" {code(f.spec)}" if f.spec else ""
        msg = f.message.removeprefix("pre-existing (the base's code fails the same cases the same way): ")
        lines.append(f"- **{escape(r.check)}**{target}{tag}: {escape(first_line(msg, 300))}")
    return [details(f"{len(items)} failure(s) that the base's code has too: the repository's debt, not this change's",
                    "\n".join(lines))]


def _blocking_findings_of(ctx: _Ctx) -> set[int]:
    return {id(i.finding) for i in ctx.verdict.blocking if i.finding is not None}


def _fixed_lines(ctx: _Ctx) -> list[str]:
    return [f"- ✅ **{escape(r.check)}**{f' {code(f.spec)}' if f.spec else ''}: {escape(first_line(f.message, 300))}"
            for r, f in _changes(ctx, "fixed")]


def _collapsed(summary: str, lines: list[str]) -> list[str]:
    """One collapsed block of ``lines`` (a long list nobody needs to scroll past)."""
    return [details(summary, "\n".join(lines))] if lines else []


def _verdict_block(ctx: _Ctx) -> str:
    icon = "✅" if ctx.verdict.passed else "❌"
    lines = [f"## {icon} {escape(ctx.verdict.headline)}"]
    rec = ctx.record
    meta = []
    if rec.base or rec.head:
        meta.append(f"base {code(short_sha(rec.base or '?'))} → head {code(short_sha(rec.head or '?'))}")
    if rec.rules:  # whose policy and specs judged: the base branch's tip (the merge base only when they agree)
        meta.append(f"rules of {code(short_sha(rec.rules))}, the base branch's tip"
                    + (" and the merge base" if rec.rules == rec.base else ""))
    if rec.policy_source:
        meta.append(f"policy {code(rec.policy_source)}")
    if meta:
        lines.append(" · ".join(meta))
    lines.extend(f"> {escape(n)}" for n in rec.notes)
    return "\n\n".join(lines)


def _blocking_lines(items: list[Item]) -> list[str]:
    """One line per blocking finding; jobs that did not run share one line per reason."""
    lines: list[str] = []
    groups: dict[tuple[str, str], list[JobResult]] = {}
    for item in once(items):  # a finding several jobs made at one place: one line (see verdict.same_place)
        job = item.job
        if item.finding is None and job is not None and job.status in (Status.NOT_RUN, Status.ERROR):
            key = (_verb(job), reason_key(job))
            if key not in groups:
                groups[key] = []
                lines.append("")  # the group's place, filled below
            groups[key].append(job)
            continue
        lines.append(_blocking_line(item))
    filled = iter(f"- {_jobs_phrase(jobs)}: {escape(verb)}: {escape(first_line(_said(key, jobs), 300))}"
                  for (verb, key), jobs in groups.items())
    return [line or next(filled) for line in lines]


def _blocking_line(item: Item) -> str:
    f = item.finding
    if f is None:
        return f"- {escape(first_line(item.reason, 300))}"
    target = f" {code(f.spec)}" if f.spec else ""
    info = check_info(f.check)
    if f.details.get("change") == "new" and info is not None and info.differential == "build":
        target += " (new: the base's build does not have it)"
    elif f.details.get("change") == "new":
        target += (" (new: the base's code fails this case too, far less)" if f.details.get("base_fails_less")
                   else " (new: the base's code passes this case)")
    where = f" — {code(f.location)}" if f.location else ""
    return f"- **{escape(f.check)}**{target}: {escape(first_line(item.reason, 300))}{where}"


def _said(key: str, jobs: list[JobResult]) -> str:
    """A group's reason: the job's own where the group holds one check, else the shared one."""
    return key if len({r.check for r in jobs}) > 1 else (jobs[0].reason or "no reason given")


def _verb(r: JobResult) -> str:
    return "not run" if r.status is Status.NOT_RUN else "could not run"


_MAX_TARGETS = 6  # spec ids named in one grouped line before "and N more"


def _jobs_phrase(jobs: list[JobResult]) -> str:
    """"**memcheck**, **racecheck** for `a.py::x`, `b.py::y` (4 jobs)": checks and targets, each once."""
    checks = check_order({r.check for r in jobs})
    targets = list(dict.fromkeys(job_target(r) for r in jobs))
    shown = ", ".join(code(t) for t in targets[:_MAX_TARGETS])
    more = f" and {len(targets) - _MAX_TARGETS} more" if len(targets) > _MAX_TARGETS else ""
    count = f" ({len(jobs)} jobs)" if len(jobs) > 1 else ""
    return f"{', '.join(f'**{escape(c)}**' for c in checks)} for {shown}{more}{count}"


# --- Kernel tables --------------------------------------------------------------------

def _kernel_blocks(ctx: _Ctx) -> list[str]:
    blocks = []
    claimed: set[int] = set()
    for k in ctx.record.kernels:
        jobs = [r for r in ctx.record.results if k.path in r.kernels or (r.spec and r.spec in k.specs)]
        claimed.update(id(r) for r in jobs)
        blocks.append(_kernel_block(ctx, k, jobs))
    others = [r for r in ctx.record.results if id(r) not in claimed]
    if others:
        blocks.append("#### Other jobs\n\n" + _job_table(ctx, others))
    return blocks


def _selection_lines(ctx: _Ctx) -> list[str]:
    """Why each spec ran ("imports kernels/ops.py, changed") and what it was seen to launch."""
    from ..coverage import launched_by_spec

    launched = launched_by_spec(ctx.record.results)
    lines = []
    for sid, why in sorted(ctx.record.selected.items()):
        seen = f" · launched {escape(launched[sid].describe())}" if sid in launched else ""
        lines.append(f"- {code(sid)}: {escape('; '.join(why))}{seen}")
    return lines


_MAX_FUNCTIONS = 12  # kernel names listed per file


def _kernel_block(ctx: _Ctx, k: ChangedKernel, jobs: list[JobResult]) -> str:
    specs = ", ".join(code(s) for s in k.specs) if k.specs else "**none** — no gate spec covers this kernel"
    change = escape(k.status) + (f" via {', '.join(code(v) for v in k.via)}" if k.via else "")
    head = f"#### {code(k.path)}\n\n{escape(k.language)} · {change} · specs: {specs}"
    if k.functions:
        names = ", ".join(f"{code(n)} (line {line})" for n, line in k.functions[:_MAX_FUNCTIONS])
        more = f" and {len(k.functions) - _MAX_FUNCTIONS} more" if len(k.functions) > _MAX_FUNCTIONS else ""
        head += f"\n\nkernels: {names}{more}"
    if not jobs:
        return head + "\n\nNo checks ran for this kernel."
    ran = [r for r in jobs if r.status is not Status.NOT_RUN]
    skipped = [r for r in jobs if r.status is Status.NOT_RUN]
    parts = [head] + ([_job_table(ctx, ran)] if ran else [])
    if skipped:
        checks = ", ".join(escape(c) for c in check_order({r.check for r in skipped}))
        icon = "⛔" if any(id(r) in ctx.blocking_jobs for r in skipped) else "⏭️"
        parts.append(f"{icon} Not run: {checks} (see *Not verified, and why*)")
    return "\n\n".join(parts)


def _job_table(ctx: _Ctx, jobs: list[JobResult]) -> str:
    rows = ["| Check | Spec | Result | Cases | Time |", "| --- | --- | --- | --- | --- |"]
    order = {c: i for i, c in enumerate(check_order(r.check for r in jobs))}
    for r in sorted(jobs, key=lambda r: (order[r.check], job_target(r))):
        spec = code(r.spec) if r.spec else "—"
        badge = _badge(r, id(r) in ctx.blocking_jobs)
        rows.append(f"| {escape(r.check)} | {spec} | {badge} | {case_words(r) if r.cases or planned(r) else ''} | {_duration(r.duration_s)} |")
    return "\n".join(rows)


# --- Failure details --------------------------------------------------------------------

def _detail_blocks(ctx: _Ctx) -> list[str]:
    """Each blocking finding with more than one line, collapsed; the first one open."""
    blocks: list[str] = []
    seen_jobs: set[int] = set()
    for item in ctx.verdict.blocking:
        f = item.finding
        if f is None or ("\n" not in f.message.strip() and not f.repro and not f.case):
            continue  # a one-line finding is shown whole in the blocking list
        heading = None
        if item.job is not None and id(item.job) not in seen_jobs:
            seen_jobs.add(id(item.job))
            heading = f"#### ❌ {escape(item.job.check)} · {code(job_target(item.job))}"
        blocks.append(_finding_block(f, heading, ctx.message_limit, open_=not blocks))
    return blocks


def _finding_block(f: Finding, heading: str | None, limit: int | None, *, open_: bool = False) -> str:
    facts = [f.kind] + ([f"case {f.case}"] if f.case else []) + ([f"at {f.location}"] if f.location else [])
    body = [fence(_shorten(f.message, limit))]
    if f.repro:
        body += ["Reproduce:", fence(f.repro, "sh")]
    summary = f"{' · '.join(facts)}: {first_line(f.message, 160)}"
    block = details(summary, "\n\n".join(body), open_=open_)
    return f"{heading}\n\n{block}" if heading else block


# --- Not verified, warnings ------------------------------------------------------------

_DROPPED = re.compile(r"^(?P<dtypes>.+?) cases not run: (?P<why>.+)$", re.S)


def _unverified_blocks(ctx: _Ctx) -> list[str]:
    """Checks that did not run and dtypes that were dropped, each reason once, with what it covers."""
    blocks = [_unverified_group(verb, reason, blocks, jobs, ctx.log_lines)
              for (verb, reason, blocks), jobs in group_not_run(ctx.record.results, ctx.blocking_jobs).items()]
    blocks += _dropped_dtype_lines(ctx.record.results)
    blocks += [f"- ⛔ {escape(first_line(i.reason, 300))} — **blocks the merge**" for i in missing_items(ctx.verdict)]
    return blocks


def _unverified_group(verb: str, reason: str, blocks: bool, jobs: list[JobResult], log_lines: int) -> str:
    impact = "**blocks the merge**" if blocks else "does not block the merge"
    icon = ("⛔" if verb == "not run" else "💥") if blocks else "⏭️"
    line = f"- {icon} {_jobs_phrase(jobs)}: {verb}: {escape(first_line(reason, 300))} — {impact}"
    tails = [r for r in jobs if r.log_tail]
    for r in tails:
        label = f"log tail: {r.check} {job_target(r)}" if len(jobs) > 1 else "log tail"
        line += "\n\n" + details(label, fence(_tail(r.log_tail or "", log_lines))) + "\n"
    return line


def _dropped_dtype_lines(results: Iterable[JobResult]) -> list[str]:
    """dtypes whose cases a check did not run (bf16 under the Triton interpreter), one line per reason."""
    groups: dict[tuple[str, str, str], list[str]] = {}
    for r in results:
        for f in r.findings:
            if f.kind != "dtype-not-run":
                continue
            m = _DROPPED.match(clean_text(f.message).strip())
            dtypes, why = (m["dtypes"], m["why"]) if m else ("some dtypes", f.message)
            targets = groups.setdefault((f.check, dtypes, why), [])
            if job_target(r) not in targets:
                targets.append(job_target(r))
    return [f"- ⏭️ **{escape(dtypes)}** not verified by **{escape(check)}** for "
            f"{', '.join(code(t) for t in targets[:_MAX_TARGETS])}"
            f"{f' and {len(targets) - _MAX_TARGETS} more' if len(targets) > _MAX_TARGETS else ''}: "
            f"{escape(first_line(why, 300))}"
            for (check, dtypes, why), targets in groups.items()]


def _speed_blocks(ctx: _Ctx) -> list[str]:
    """The speed check's figures for each spec it timed: head/base time and its interval on one line,
    how it was timed and each case's figures collapsed beneath (see gpu_gate.judge.checks.speed)."""
    out: list[str] = []
    for r in ctx.record.results:
        for f in r.findings:
            if r.check != "speed" or f.kind != "speed":
                continue
            head, _, rest = f.message.partition("; ")
            line = f"- {code(job_target(r))}: {escape(first_line(head.removeprefix('speed: '), 300))}"
            out.append(line if not rest else f"{line}\n\n" + details("how it was timed, case by case",
                                                                      fence(_shorten(rest, ctx.message_limit))))
    return out


def _warning_blocks(ctx: _Ctx) -> list[str]:
    return [_warning_block(i, ctx.message_limit) for i in ctx.verdict.warnings
            if i.finding is not None and i.finding.details.get("change") != "pre-existing"]


def _warning_block(item: Item, limit: int | None) -> str:
    f = item.finding
    assert f is not None
    advisory = " (advisory)" if item.job is not None and item.job.level != "required" else ""
    target = f" {code(f.spec)}" if f.spec else ""
    where = f" — {code(f.location)}" if f.location else ""
    line = f"- ⚠️ **{escape(f.check)}**{advisory}{target}: {escape(first_line(item.reason, 300))}{where}"
    if "\n" not in f.message.strip() and not f.repro:
        return line
    body = [fence(_shorten(f.message, limit))]
    if f.repro:
        body += ["Reproduce:", fence(f.repro, "sh")]
    return f"{line}\n\n" + details("details", "\n\n".join(body))


