from __future__ import annotations

from pathlib import Path

from gpu_gate.findings import Finding, JobResult, Severity, Status
from gpu_gate.record import RunRecord
from gpu_gate.report import cut, first_line
from gpu_gate.report.console import gha_annotation, gha_annotations, gha_group, progress_line, render_summary
from gpu_gate.verdict import Rules, decide
from test_report_fixtures import NO_GPU, REPRO, RMS, ROWSUM, build


def test_progress_line_for_a_failed_job(tmp_path: Path) -> None:
    record, _ = build(tmp_path)
    failed = next(r for r in record.results if r.job_id == f"equivalence:{RMS}")
    assert progress_line(failed, 3, 12, 12.34) == (
        f"[ 3/12] FAIL    equivalence {RMS}  2 errors, 64 cases  4.1s  (elapsed 12.3s)")


def test_progress_lines_for_not_run_cached_and_advisory_jobs(tmp_path: Path) -> None:
    by_id = {r.job_id: r for r in build(tmp_path)[0].results}
    assert progress_line(by_id[f"memcheck:{RMS}"], 4, 6, 1.0) == f"[4/6] NOT RUN memcheck {RMS}  {NO_GPU}  0.0s  (elapsed 1.0s)"
    assert "4 cases, cached from 4f2a9c1d0b7e" in progress_line(by_id[f"racecheck:{RMS}"], 5, 6, 2.0)
    assert f"FAIL    initcheck (advisory) {RMS}  1 error, 4 cases" in progress_line(by_id[f"initcheck:{RMS}"], 6, 6, 3.0)
    assert f"ERROR   equivalence {ROWSUM}  timed out after 600 s" in progress_line(by_id[f"equivalence:{ROWSUM}"], 1, 6, 0.5)


def test_summary_gives_reasons_locations_and_repro(tmp_path: Path) -> None:
    text = render_summary(*build(tmp_path))
    lines = text.splitlines()
    assert lines[0].startswith("gpu-gate: FAILED - 6 jobs")
    assert f"  - equivalence mismatch {RMS}: Tensor-likes are not close!" in lines
    assert "      Mismatched elements: 3 / 100 (3.0%)" in lines
    assert "      at csrc/rmsnorm.cu:42, case c0017" in lines
    assert f"      repro: {REPRO}" in lines
    assert f"  - memcheck for {RMS}: not run: {NO_GPU} (blocks the merge)" in lines
    assert any("produced no result" in ln and ln.endswith("(blocks the merge)") for ln in lines)
    assert "Warnings (1, do not block the merge):" in lines
    assert "\x1b" not in text


def test_group_markers() -> None:
    assert gha_group("equivalence gate/a.py::k\n") == ("::group::equivalence gate/a.py::k%0A", "::endgroup::")


def test_annotation_escapes_data_and_properties() -> None:
    f = Finding("racecheck", "race", "Race on smem[3]\r\n100% of runs, see: log", file="csrc/a,b:c.cu", line=7,
                spec="g.py::k")
    assert gha_annotation(f) == ("::error file=csrc/a%2Cb%3Ac.cu,line=7,title=gpu-gate racecheck%3A race "
                                 "(g.py%3A%3Ak)::Race on smem[3]%0A100%25 of runs, see: log")


def test_annotation_level_follows_severity_unless_given() -> None:
    note = Finding("compile", "resources", "40 registers", severity=Severity.NOTE)
    assert gha_annotation(note).startswith("::notice title=gpu-gate compile%3A resources::")
    assert gha_annotation(note, "warning").startswith("::warning ")


def test_annotations_for_a_run_follow_the_verdict(tmp_path: Path) -> None:
    lines = gha_annotations(*build(tmp_path))
    assert [ln.split(" ", 1)[0] for ln in lines] == ["::error", "::error", "::error", "::warning"]
    assert lines[1].startswith("::error file=csrc/rmsnorm.cu,line=42,")
    assert lines[3].startswith("::warning file=csrc/rmsnorm.cu,line=57,")


SPECS = ("gate/axpby_gate.py::axpby_gate", "gate/rmsnorm_gate.py::rmsnorm_gate")
GPU_ONLY = ("determinism", "memcheck", "racecheck", "synccheck", "initcheck")


def cpu_run() -> RunRecord:
    """A CPU machine's run: every GPU-only check of two specs not run, for one reason."""
    results = [JobResult(f"{c}:{s}", c, Status.NOT_RUN, spec=s, reason=f"no GPU on this machine: {c} needs a CUDA device",
                         level="advisory" if c == "initcheck" else "required") for s in SPECS for c in GPU_ONLY]
    results.append(JobResult(f"equivalence:{SPECS[0]}", "equivalence", Status.PASSED, spec=SPECS[0], cases=24))
    return RunRecord(base="a" * 40, head="b" * 40, results=results)


def test_not_run_here_is_said_once_per_reason_with_the_jobs_folded() -> None:
    record = cpu_run()
    text = render_summary(record, decide(record, Rules(not_run="warn")))
    lines = text.splitlines()
    (folded,) = [ln for ln in lines if "not run:" in ln]
    assert folded == ("  - determinism, memcheck, racecheck, synccheck, initcheck for gate/axpby_gate.py::axpby_gate, "
                      "gate/rmsnorm_gate.py::rmsnorm_gate (10 jobs): not run: no GPU on this machine: each check "
                      "needs a CUDA device (does not block; GPU-only, not run here)")
    assert text.count("needs a CUDA device") == 1


def test_a_reason_that_blocks_some_jobs_is_its_own_line() -> None:
    record = cpu_run()
    lines = render_summary(record, decide(record, Rules(not_run="fail"))).splitlines()
    said = [ln for ln in lines if "not run:" in ln]
    assert [ln.rsplit("(", 1)[1] for ln in said] == ["blocks the merge)", "does not block; GPU-only, not run here)"]
    assert said[1].startswith("  - initcheck for ") and said[1].count("initcheck") == 2, "one check: its own reason"


def test_progress_lines_give_a_reason_once_and_point_back_to_it() -> None:
    record = cpu_run()
    said: dict[str, int] = {}
    lines = [progress_line(r, i, 11, 0.0, said=said) for i, r in enumerate(record.results, 1)]
    assert lines[0].endswith("no GPU on this machine: determinism needs a CUDA device  0.0s  (elapsed 0.0s)")
    assert all("the same reason as [ 1/11]" in ln and "CUDA" not in ln for ln in lines[1:10])
    assert lines[10].startswith("[11/11] PASS    equivalence")
    assert "CUDA device" in progress_line(record.results[3], 4, 11, 0.0), "without the run's memory: the reason"


def test_messages_are_cut_between_words_never_inside_one() -> None:
    text = ("kernel _rmsnorm_kernel computes an address offset as a 32-bit product of its program index and a "
            "runtime value (sm_90): once that product passes 2^31 the offset wraps")
    for limit in range(40, len(text)):
        shown = cut(text, limit)
        assert len(shown) <= limit and shown.endswith("…")
        after = text[len(shown) - 1]  # the first character left out
        assert text.startswith(shown[:-1]) and not (shown[-2].isalnum() and after.isalnum()), (limit, shown)
    assert cut(text, len(text)) == text
    assert first_line("x" * 50 + " tail", 20) == "x" * 19 + "…", "one word longer than the room: cut inside"
    assert first_line("Tensor-likes are not close!\nMismatched elements: 3 / 100 (3.0%)", 30) == \
        "Mismatched elements: 3 / 100…"


def test_an_exceptions_line_in_a_finding_is_cut_between_words_too() -> None:
    from gpu_gate.worker.calling import first_line as exception_line

    exc = RuntimeError("input must be contiguous along the last dimension")
    assert exception_line(exc, 40) == "RuntimeError: input must be contiguous…"
    assert exception_line(exc, 45) == "RuntimeError: input must be contiguous along…"
