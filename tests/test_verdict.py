"""The policy decides the verdict; required checks that could not run fail closed."""
from __future__ import annotations

from gpu_gate.exitcodes import ExitCode
from gpu_gate.findings import Finding, JobResult, Severity, Status
from gpu_gate.record import RunRecord, merge
from gpu_gate.verdict import Rules, decide


def _job(jid: str, status: Status, level: str = "required", findings: list[Finding] | None = None,
         reason: str | None = None) -> JobResult:
    return JobResult(job_id=jid, check=jid.split(":")[0], status=status, level=level, spec="g.py::s",
                     findings=findings or [], reason=reason)


def test_no_kernel_changes_is_green() -> None:
    v = decide(RunRecord(), Rules())
    assert v.passed and v.exit_code is ExitCode.PASSED
    assert v.headline == "gpu-gate: PASSED - no kernel changes"


def test_required_not_run_fails_closed_unless_policy_allows() -> None:
    rec = RunRecord(results=[_job("memcheck:g.py::s", Status.NOT_RUN, reason="no GPU")], planned_jobs=[])
    assert not decide(rec, Rules()).passed
    assert decide(rec, Rules(not_run="warn")).passed
    # an ERROR (crash, timeout, import error) fails closed even with not_run: warn
    rec.results = [_job("memcheck:g.py::s", Status.ERROR, reason="timeout")]
    assert not decide(rec, Rules(not_run="warn")).passed


def test_advisory_failures_warn_and_refusals_follow_policy() -> None:
    bad = Finding(check="initcheck", kind="uninitialized-read", message="m")
    refused = Finding(check="equivalence", kind="refused", message="r", severity=Severity.WARNING)
    rec = RunRecord(results=[_job("initcheck:x", Status.FAILED, "advisory", [bad]),
                             _job("equivalence:x", Status.PASSED, findings=[refused])])
    v = decide(rec, Rules())
    assert v.passed and len(v.warnings) == 2
    assert not decide(rec, Rules(refusals="fail")).passed
    assert len(decide(rec, Rules(refusals="ignore")).warnings) == 1


def test_a_new_refusal_blocks_unless_refusals_are_ignored_and_an_old_one_is_a_refusal() -> None:
    """Differential runs: a case the base's code ran and passed, refused by the head, blocks under
    the default `refusals: warn`; one the base's code refuses too follows `refusals`, not
    `preexisting` (a documented limit at both commits is not a failure of either)."""
    new = Finding(check="equivalence", kind="refused", message="r", details={"change": "new"})
    rec = RunRecord(results=[_job("equivalence:x", Status.FAILED, findings=[new])])
    assert not decide(rec, Rules()).passed
    assert not decide(rec, Rules(refusals="warn", preexisting="warn")).passed
    ignored = decide(rec, Rules(refusals="ignore"))
    assert ignored.passed and not ignored.warnings
    old = Finding(check="equivalence", kind="refused", message="r", severity=Severity.WARNING,
                  details={"change": "pre-existing"})
    rec = RunRecord(results=[_job("equivalence:x", Status.PASSED, findings=[old])])
    assert decide(rec, Rules(preexisting="fail")).passed
    assert not decide(rec, Rules(refusals="fail")).passed


def test_uncovered_follows_policy() -> None:
    f = Finding(check="coverage", kind="uncovered", message="k.cu changed but no gate spec covers it")
    rec = RunRecord(plan_findings=[f])
    assert not decide(rec, Rules(uncovered="fail")).passed
    assert decide(rec, Rules(uncovered="warn")).passed and decide(rec, Rules(uncovered="warn")).warnings
    assert decide(rec, Rules(uncovered="ignore")).passed


def test_a_lost_shard_blocks() -> None:
    a = RunRecord(results=[_job("equivalence:a", Status.PASSED)], planned_jobs=["equivalence:a", "memcheck:a"],
                  shard="1/2")
    merged = merge([a])
    v = decide(merged, Rules())
    assert not v.passed
    assert v.blocking[0].reason.startswith("job memcheck:a produced no result")
    b = RunRecord(results=[_job("memcheck:a", Status.PASSED)], planned_jobs=["memcheck:a"], shard="2/2")
    assert decide(merge([a, b]), Rules()).passed


def _int32(job: str, extra: str = "") -> Finding:
    return Finding(check="compile", kind="int32-offset", severity=Severity.WARNING, file="kernels/k.py", line=11,
                   message=f"pre-existing: kernels/k.py:11: kernel k computes a 32-bit offset (sm_90){extra}",
                   details={"kernel": "k", "arch": "sm_90", "change": "pre-existing"}, spec=job)


def test_a_warning_two_jobs_found_at_one_place_is_listed_once_with_the_fuller_message() -> None:
    """The compile check and an equivalence job reading its launched kernels both read a kernel's
    build: the same int32-offset at the same line was listed twice (the demo showed four lines for two)."""
    from gpu_gate.github.checkrun import check_annotations

    launched = _int32("g.py::s", " (read from the PTX as the cases launched it: BLOCK=128)")
    other_line = Finding(check="compile", kind="int32-offset", severity=Severity.WARNING, file="kernels/k.py",
                         line=15, message="kernels/k.py:15: another", details={"kernel": "k", "arch": "sm_90"})
    rec = RunRecord(results=[_job("compile:kernels/k.py", Status.PASSED, findings=[_int32(""), other_line]),
                             _job("equivalence:g.py::s", Status.PASSED, findings=[launched])])
    v = decide(rec, Rules())
    assert v.passed and [i.finding.line for i in v.warnings if i.finding] == [11, 15]
    assert "as the cases launched it" in v.warnings[0].reason
    anns = check_annotations(rec, v)
    assert sorted(a["start_line"] for a in anns) == [11, 15]


def test_blocking_findings_stay_one_per_job_and_other_architectures_or_lines_stay_apart() -> None:
    hopper = _int32("")
    ampere = Finding(check="compile", kind="int32-offset", severity=Severity.WARNING, file="kernels/k.py", line=11,
                     message="kernels/k.py:11 (sm_80)", details={"kernel": "k", "arch": "sm_80"})
    error = Finding(check="compile", kind="int32-offset", severity=Severity.ERROR, file="kernels/k.py", line=11,
                    message="new", details={"kernel": "k", "arch": "sm_90", "change": "new"})
    rec = RunRecord(results=[_job("compile:a", Status.FAILED, findings=[hopper, ampere, error]),
                             _job("equivalence:b", Status.FAILED, findings=[error])])
    v = decide(rec, Rules())
    assert len(v.warnings) == 2 and len(v.blocking) == 2 and not v.passed


def test_a_finding_several_jobs_made_at_one_place_is_one_blocking_problem() -> None:
    """The compile check and an equivalence job that reads the builds its cases launched both find a
    32-bit offset at one line of one kernel: one problem to the reader (the headline counts it once and
    gives the jobs' count beside it; the console and the comment list it once), while each job's status
    still rests on its own finding. Two places stay two."""
    from gpu_gate.report.console import render_summary
    from gpu_gate.report.markdown import render_markdown as render

    def offset(line: int, message: str = "32-bit offset") -> Finding:
        return Finding(check="compile", kind="int32-offset", message=f"{message} at line {line}", file="k.py",
                       line=line, details={"kernel": "_k", "arch": "sm_90", "change": "new"})

    rec = RunRecord(results=[_job("compile:x", Status.FAILED, findings=[offset(10), offset(20)]),
                             _job("equivalence:x", Status.FAILED,
                                  findings=[offset(10, "32-bit offset, as the cases launched it"), offset(20)])],
                    planned_jobs=["compile:x", "equivalence:x"])
    v = decide(rec, Rules())
    assert not v.passed and len(v.blocking) == 4
    assert "; 2 blocking (4 findings of the jobs)" in v.headline, v.headline
    console = render_summary(rec, v)
    assert console.count("at line 10") == 1 and console.count("at line 20") == 1, console
    assert "as the cases launched it" in console  # the message that says the most
    comment = render(rec, v)
    blocking = comment.split("### Blocking")[1].split("###")[0]
    assert blocking.count("at line 10") == 1 and blocking.count("at line 20") == 1, blocking
    from gpu_gate.github.checkrun import check_annotations

    anns = check_annotations(rec, v)
    assert sorted((a["start_line"], a["annotation_level"]) for a in anns) == [(10, "failure"), (20, "failure")], anns
    single = RunRecord(results=[_job("compile:x", Status.FAILED, findings=[offset(10)])], planned_jobs=["compile:x"])
    assert decide(single, Rules()).headline.endswith("; 1 blocking"), decide(single, Rules()).headline
