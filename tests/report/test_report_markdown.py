from __future__ import annotations

import math
import re
from pathlib import Path

import pytest

from gpu_gate.findings import Finding, JobResult, Severity, Status
from gpu_gate.job_extra import JobExtra
from gpu_gate.record import ChangedKernel, RunRecord
from gpu_gate.report.markdown import render_markdown
from gpu_gate.verdict import Rules, Verdict, decide
from test_report_fixtures import CACHED_SHA, MISMATCH, NO_GPU, REPRO, RMS, ROWSUM, build

COMMENT_LIMIT = 65_536
URL = "https://github.com/acme/kernels/actions/runs/42#artifacts"


def fences_balanced(text: str) -> bool:
    """True when every fenced code block that opens also closes (CommonMark rules for backtick fences)."""
    open_len = 0
    for line in text.split("\n"):
        m = re.fullmatch(r"(`{3,})([^`]*)", line)
        if not m:
            continue
        if open_len == 0:
            open_len = len(m.group(1))
        elif not m.group(2).strip() and len(m.group(1)) >= open_len:
            open_len = 0
    return open_len == 0


def section(md: str, title: str) -> str:
    start = md.index(f"### {title}")
    end = md.find("\n### ", start + 1)
    return md[start: end if end != -1 else None]


@pytest.fixture()
def md(tmp_path: Path) -> str:
    return render_markdown(*build(tmp_path))


def test_verdict_line_comes_first(md: str) -> None:
    assert md.splitlines()[0] == ("## ❌ gpu-gate: FAILED - 6 jobs, 2 passed, 2 failed, 1 could not run, "
                                  "1 not run; 6 blocking; 64 equivalence cases run")


def test_passing_run_shows_a_green_verdict() -> None:
    record = RunRecord(kernels=[ChangedKernel("a.cu", "cuda", "modified", specs=("g.py::a",))],
                       results=[JobResult("j", "equivalence", Status.PASSED, spec="g.py::a", kernels=("a.cu",),
                                          cases=10, duration_s=1.0)])
    text = render_markdown(record, decide(record, Rules()))
    assert text.startswith("## ✅ gpu-gate: PASSED - 1 jobs, 1 passed, 0 failed")
    assert "### Blocking" not in text and "### Not run" not in text


def test_a_compile_job_that_compiled_nothing_shows_no_empty_resources_table() -> None:
    record = RunRecord(kernels=[ChangedKernel("k.py", "triton", "modified", specs=())],
                       results=[JobResult("compile:k.py", "compile", Status.PASSED, kernels=("k.py",), cases=0,
                                          duration_s=1.0, extra=JobExtra(resources=[]))])
    text = render_markdown(record, decide(record, Rules()))
    assert "Compile resources" not in text and "registers, spills" not in text


def test_blocking_list_names_each_reason_with_its_location(md: str) -> None:
    blocking = section(md, "Blocking")
    assert f"- **equivalence** `{RMS}`: Mismatched elements: 3 / 100 (3.0%) — `csrc/rmsnorm.cu:42`" in blocking
    assert "csrc/scatter.cu changed and no gate spec covers it" in blocking
    assert "synccheck:gate/rowsum\\_gate.py::rowsum\\_gate produced no result" in blocking
    assert f"- **memcheck** for `{RMS}`: not run: {NO_GPU.replace('_', chr(92) + '_')}" in blocking
    assert blocking.count("\n- ") == 6


def test_kernel_tables_show_each_checks_result(md: str) -> None:
    kernels = section(md, "Kernels")
    assert "#### `csrc/rmsnorm.cu`\n\ncuda · modified · specs: `gate/rmsnorm_gate.py::rmsnorm_gate`" in kernels
    assert f"| equivalence | `{RMS}` | ❌ failed (2 errors) | 64 cases | 4.1s |" in kernels
    assert "| memcheck |" not in kernels  # not run: one line under the table, the reason once below
    assert "⛔ Not run: memcheck (see *Not verified, and why*)" in kernels
    assert f"| racecheck | `{RMS}` | ✅ passed · cached from `{CACHED_SHA[:12]}` | 4 cases | 7.4s |" in kernels
    assert f"| initcheck | `{RMS}` | ⚠️ failed (1 error) (advisory) | 4 cases | 9.5s |" in kernels
    assert f"| equivalence | `{ROWSUM}` | 💥 could not run |  | 600.0s |" in kernels
    assert "#### `csrc/scatter.cu`\n\ncuda · added · specs: **none** — no gate spec covers this kernel" in kernels


def test_failure_details_render_assert_close_text_verbatim_and_the_repro(md: str) -> None:
    details = section(md, "Failure details")
    assert ("<details open><summary>mismatch · case c0017 · at csrc/rmsnorm.cu:42: Mismatched elements: 3 / 100 "
            f"(3.0%)</summary>\n\n```text\n{MISMATCH}\n```") in details
    assert f"Reproduce:\n\n```sh\n{REPRO}\n```\n\n</details>" in details
    assert "<details><summary>nan · case c0031: NaN in output" in details  # only the first is open
    assert details.count("<details") == details.count("</details>") == 2
    assert "scatter.cu" not in details  # one-line plan findings are shown whole in the blocking list


def test_not_verified_section_gives_every_reason(md: str) -> None:
    not_run = section(md, "Not verified, and why")
    assert f"- ⛔ **memcheck** for `{RMS}`: not run: {NO_GPU.replace('_', chr(92) + '_')} — **blocks the merge**" in not_run
    assert "could not run: timed out after 600 s (process group killed) — **blocks the merge**" in not_run
    assert "Kernel hung waiting on barrier\\x00\\x07" in not_run
    assert "\x1b" not in md and "\x00" not in md


def test_advisory_failures_are_warnings(md: str) -> None:
    warnings = section(md, "Warnings (do not block the merge)")
    assert "- ⚠️ **initcheck** (advisory)" in warnings and "`csrc/rmsnorm.cu:57`" in warnings


def test_growth_curve_is_a_table_and_a_log_scale_chart(tmp_path: Path) -> None:
    md = render_markdown(*with_growth_finding(tmp_path))
    growth = section(md, "Error growth with size")
    assert "| 262144 | 0.9 | 0.005 | 180× |" in growth
    assert "⚠️ **The candidate's error grows faster with size than the baseline's.**" in growth
    chart = growth[growth.index("```mermaid"):]
    assert "xychart-beta" in chart and 'x-axis "n" [256, 4096, 262144]' in chart
    assert 'y-axis "log10(error)" -4 --> 0' in chart
    lines = re.findall(r"^    line \[(.*)\]$", chart, flags=re.M)
    assert [float(v) for v in lines[0].split(", ")] == [round(math.log10(v), 3) for v in (1e-3, 1.2e-2, 0.9)]
    assert [float(v) for v in lines[1].split(", ")] == [round(math.log10(v), 3) for v in (8e-4, 2e-3, 5e-3)]


def test_compile_resources_table_flags_spills(md: str) -> None:
    resources = section(md, "Compile resources")
    assert "| `rmsnorm_bwd` ⚠️ | sm\\_90 | 255 | 16 | 24 | 64 | 4096 |" in resources
    assert "| `rmsnorm_fwd` | sm\\_90 | 40 | 0 | 0 | 0 | 1024 |" in resources


def test_message_containing_backticks_and_html_cannot_break_out(tmp_path: Path) -> None:
    nasty = "```\n</details><img src=x> | `x` ```` **bold**"
    record = RunRecord(results=[JobResult("j", "equivalence", Status.FAILED, spec="g.py::k`|x", findings=[
        Finding("equivalence", "mismatch", nasty, spec="g.py::k`|x", case="c1")])])
    text = render_markdown(record, decide(record, Rules()))
    assert fences_balanced(text)
    assert f"`````text\n{nasty}\n`````" in text
    assert "- **equivalence** ``g.py::k`\\|x``: \\`\\`\\`" in text  # the list line shows it as text


def _huge(n_findings: int, message: str = MISMATCH) -> tuple[RunRecord, Verdict]:
    kernels = [ChangedKernel(f"csrc/k{i}.cu", "cuda", "modified", specs=(f"gate/k{i}_gate.py::k{i}",)) for i in range(20)]
    results = []
    for i, k in enumerate(kernels):
        spec = k.specs[0]
        findings = [Finding("equivalence", "mismatch", f"{message}\ncase {j} 😀 日本", spec=spec, case=f"c{j:05d}",
                            file=k.path, line=j + 1, repro=f"gpu-gate repro '{spec}' --case c{j:05d}")
                    for j in range(n_findings // len(kernels))]
        results.append(JobResult(f"equivalence:{spec}", "equivalence", Status.FAILED, spec=spec, kernels=(k.path,),
                                 findings=findings, cases=200))
        results.append(JobResult(f"memcheck:{spec}", "memcheck", Status.NOT_RUN, spec=spec, kernels=(k.path,),
                                 reason=NO_GPU))
    record = RunRecord(kernels=kernels, results=results)
    return record, decide(record, Rules())


def test_huge_report_is_cut_to_the_comment_limit_and_links_the_full_report() -> None:
    record, verdict = _huge(4000)
    full = render_markdown(record, verdict)
    assert len(full) > 1_000_000
    text = render_markdown(record, verdict, max_chars=COMMENT_LIMIT, artifact_url=URL)
    assert len(text) <= COMMENT_LIMIT
    assert text.startswith("## ❌ gpu-gate: FAILED")
    assert text.rstrip("\n").endswith(f"Full report: {URL}")
    assert fences_balanced(text)
    assert "### Kernels" in text and all(f"#### `csrc/k{i}.cu`" in text for i in range(20))
    assert section(text, "Blocking").count("\n- ") == 100
    assert "_… 3901 more blocking reasons not shown; see the full report._" in text
    assert "more failure details not shown" in text
    not_run = section(text, "Not verified, and why")
    assert not_run.count(NO_GPU.replace("_", "\\_")) == 1  # one reason, once, with the jobs it covers
    assert "`gate/k5_gate.py::k5` and 14 more (20 jobs): not run:" in not_run


def test_shortened_report_without_url_points_to_the_artifacts() -> None:
    record, verdict = _huge(400)
    text = render_markdown(record, verdict, max_chars=20_000)
    assert len(text) <= 20_000 and fences_balanced(text)
    assert text.rstrip("\n").endswith("is in this run's job artifacts.")


@pytest.mark.parametrize("limit", [600, 2_000, 7_777, 30_000, 65_536])
def test_any_limit_is_respected_without_cutting_a_block(limit: int) -> None:
    record, verdict = _huge(200, message=MISMATCH + "\n" + "x" * 50_000)
    text = render_markdown(record, verdict, max_chars=limit, artifact_url=URL)
    assert len(text) <= limit
    assert fences_balanced(text)
    text.encode("utf-8")  # no lone surrogate from a split character
    if limit >= 2_000:
        assert text.rstrip("\n").endswith(f"Full report: {URL}")


def test_long_message_is_shortened_in_a_cut_report() -> None:
    record, verdict = _huge(20, message="Mismatched elements: 1 / 9 (11.1%)\n" + "y" * 100_000)
    text = render_markdown(record, verdict, max_chars=COMMENT_LIMIT, artifact_url=URL)
    assert "more characters in the full report)" in text and len(text) <= COMMENT_LIMIT


def test_report_that_fits_is_not_changed_by_the_limit(tmp_path: Path) -> None:
    record, verdict = build(tmp_path)
    full = render_markdown(record, verdict)
    assert render_markdown(record, verdict, max_chars=COMMENT_LIMIT) == full
    assert "Full report" not in full
    linked = render_markdown(record, verdict, max_chars=COMMENT_LIMIT, artifact_url=URL)
    assert linked == full + f"\n---\nFull report: {URL}\n"


# --- What a reviewer sees once, not three times ---------------------------------------------

def with_growth_finding(tmp_path: Path, severity: Severity = Severity.ERROR) -> tuple[RunRecord, Verdict]:
    """The fixture, with the growth finding its curve explains (a bf16 accumulator)."""
    record, _ = build(tmp_path)
    job = next(r for r in record.results if r.check == "equivalence" and r.spec == RMS)
    job.findings.append(Finding("equivalence", "error-growth", "error grows materially faster than torch's along "
                                "reduction dim 'n' in bfloat16", severity=severity, spec=RMS, case="c0040"))
    return record, decide(record, Rules())


def test_growth_curve_is_not_shown_when_no_growth_finding_needs_it(md: str) -> None:
    """The fixture fails on a mismatch and a NaN; a curve beside them would explain nothing."""
    assert "### Error growth with size" not in md and "xychart-beta" not in md


def test_growth_curve_that_only_informs_is_not_shown(tmp_path: Path) -> None:
    md = render_markdown(*with_growth_finding(tmp_path, Severity.NOTE))
    assert "### Error growth with size" not in md


def test_growth_curve_is_shown_beside_a_warning_it_explains(tmp_path: Path) -> None:
    md = render_markdown(*with_growth_finding(tmp_path, Severity.WARNING))
    assert "| 262144 | 0.9 | 0.005 | 180× |" in section(md, "Error growth with size")


def _many_not_run() -> tuple[RunRecord, Verdict]:
    kernels = [ChangedKernel(f"csrc/k{i}.cu", "cuda", "modified", specs=(f"gate/k{i}_gate.py::k{i}",)) for i in range(3)]
    results = []
    for k in kernels:
        spec = k.specs[0]
        results.append(JobResult(f"equivalence:{spec}", "equivalence", Status.PASSED, spec=spec, kernels=(k.path,),
                                 cases=10, duration_s=1.0))
        results += [JobResult(f"{c}:{spec}", c, Status.NOT_RUN, spec=spec, kernels=(k.path,), reason=NO_GPU)
                    for c in ("memcheck", "racecheck", "synccheck")]
    record = RunRecord(kernels=kernels, results=results)
    return record, decide(record, Rules())


def test_jobs_not_run_for_one_reason_are_named_once_with_it() -> None:
    md = render_markdown(*_many_not_run())
    reason = NO_GPU.replace("_", "\\_")
    assert md.count(reason) == 2, "once in the blocking list, once under Not verified"
    blocking = section(md, "Blocking")
    assert blocking.count("\n- ") == 1
    assert ("- **memcheck**, **racecheck**, **synccheck** for `gate/k0_gate.py::k0`, `gate/k1_gate.py::k1`, "
            f"`gate/k2_gate.py::k2` (9 jobs): not run: {reason}") in blocking
    kernels = section(md, "Kernels")
    assert kernels.count("⛔ Not run: memcheck, racecheck, synccheck") == 3 and "⛔ not run |" not in kernels
    assert section(md, "Not verified, and why").count("\n- ") == 1


def test_dtypes_dropped_under_the_interpreter_are_stated_with_the_reason() -> None:
    why = "the Triton interpreter's bfloat16 arithmetic is wrong (triton-lang/triton#5321)"
    results = [JobResult(f"equivalence:g{i}.py::k", "equivalence", Status.PASSED, spec=f"g{i}.py::k", cases=40,
                         findings=[Finding("equivalence", "dtype-not-run", f"bfloat16 cases not run: {why}",
                                           Severity.NOTE, spec=f"g{i}.py::k")]) for i in range(2)]
    record = RunRecord(results=results)
    verdict = decide(record, Rules())
    assert verdict.passed
    md = render_markdown(record, verdict)
    unverified = section(md, "Not verified, and why")
    assert ("- ⏭️ **bfloat16** not verified by **equivalence** for `g0.py::k`, `g1.py::k`: the Triton "
            "interpreter's bfloat16 arithmetic is wrong (triton-lang/triton\\#5321)") in unverified
    assert unverified.count("\n- ") == 1


def test_collapsed_summary_cannot_carry_html(tmp_path: Path) -> None:
    evil = "</summary></details><img src=x onerror=alert(1)>\nsecond line"
    record = RunRecord(results=[JobResult("j", "equivalence", Status.FAILED, spec="g.py::k", findings=[
        Finding("equivalence", "mismatch", evil, spec="g.py::k", case="c1")])])
    md = render_markdown(record, decide(record, Rules()))
    summary = re.search(r"<summary>(.*?)</summary>", md)
    assert summary and "<" not in summary.group(1) and "&lt;img src=x" in summary.group(1)
    outside_fences = re.sub(r"^```text\n.*?^```$", "", md, flags=re.M | re.S)
    assert outside_fences.count("<details") == outside_fences.count("</details>") == 1


def test_not_run_here_is_one_line_per_reason_with_every_check_and_spec_folded_in() -> None:
    from gpu_gate.findings import JobResult, Status
    from gpu_gate.record import RunRecord
    from gpu_gate.verdict import Rules, decide

    specs = ("gate/axpby_gate.py::axpby_gate", "gate/rmsnorm_gate.py::rmsnorm_gate")
    checks = ("determinism", "memcheck", "racecheck", "synccheck", "initcheck")
    record = RunRecord(base="a" * 40, head="b" * 40, results=[
        JobResult(f"{c}:{s}", c, Status.NOT_RUN, spec=s, reason=f"no GPU on this machine: {c} needs a CUDA device")
        for s in specs for c in checks])
    text = render_markdown(record, decide(record, Rules(not_run="warn")))
    section = text.split("### Not verified, and why", 1)[1]
    (line,) = [ln for ln in section.splitlines() if "not run:" in ln]
    assert line == ("- ⏭️ **determinism**, **memcheck**, **racecheck**, **synccheck**, **initcheck** for "
                    "`gate/axpby_gate.py::axpby_gate`, `gate/rmsnorm_gate.py::rmsnorm_gate` (10 jobs): not run: no "
                    "GPU on this machine: each check needs a CUDA device — does not block the merge")
    assert text.count("needs a CUDA device") == 1


def test_a_long_message_is_shortened_between_words() -> None:
    from gpu_gate.report.markdown import _shorten

    text = "word " * 40 + "tail"
    shown = _shorten(text, 52)
    head, note = shown.split("\n")
    assert head == ("word " * 10).strip() and note == f"… ({len(text) - len(head)} more characters in the full report)"
