"""A failure of the runner's tools is not the kernel's: compute-sanitizer crashing with no report is
run again on the same inputs, and, where it persists, the check is ``infrastructure`` (not run, or
an error under ``runner.infrastructure: fail``), never a red that blames the change.

On H200s the real tool crashed (exit code 139, no report) in about 3 of 70 sanitizer jobs, now and
then. These tests run the real executor, a real bubblewrap sandbox and the stand-in tool of
``test_sanitizer_outside`` (which behaves as the real one does towards its program), made to crash
as the real one did: it exits with code 139 before it writes any report."""
from __future__ import annotations

from pathlib import Path

import pytest

from gpu_gate.executor import infrastructure, job
from gpu_gate.executor.options import ExecOptions
from gpu_gate.findings import Finding, JobResult, Severity, Status
from gpu_gate.record import RunRecord
from gpu_gate.verdict import Rules, decide
from test_sanitizer_outside import BWRAP, DATA, _memcheck, _tool, cpu_sanitizer, needs_bwrap  # noqa: F401
from test_sandbox import _ids

# Put before the stand-in tool's own code: the first N runs (counted in a file) crash as the real
# tool did on an H200, with exit code 139 and no report; N = -1: every run.
CRASH = '''
import os, pathlib, sys
_spec = os.environ.get("TOOL_CRASH_FIRST")
if _spec and "--save" in sys.argv:  # not its --version or --help
    _n, _path = _spec.split(" ", 1)
    _count = pathlib.Path(_path)
    _seen = len(_count.read_text()) if _count.exists() else 0
    if int(_n) < 0 or _seen < int(_n):
        _count.write_text("x" * (_seen + 1))
        print("========= COMPUTE-SANITIZER", file=sys.stderr)
        sys.exit(139)
'''


@pytest.fixture()
def crashing(cpu_sanitizer: Path) -> Path:
    """The stand-in tool, with the crash put in before it does anything else."""
    text = cpu_sanitizer.read_text()
    head, body = text.split("\n", 1)
    cpu_sanitizer.write_text(head + "\n" + CRASH + body)
    return cpu_sanitizer


def _run(tmp_path: Path, tool: Path, box, monkeypatch: pytest.MonkeyPatch, crashes: int, errors: bool = False,
         mode: str = "not_run") -> tuple[JobResult, int]:
    count = tmp_path / f"crashes-{crashes}-{mode}-{errors}"
    monkeypatch.setenv("TOOL_CRASH_FIRST", f"{crashes} {count}")
    if errors:  # the planted overrun, as the real tool reported it on an H100
        monkeypatch.setenv("TOOL_ERRORS", str(DATA / "memcheck_cuda_tail_bug_real.xml"))
    else:
        monkeypatch.delenv("TOOL_ERRORS", raising=False)
    honest = _memcheck(tmp_path / "repo", "honest", False)
    opts = ExecOptions(repo_root=tmp_path / "repo", gpus=(), timeout_s=300, sandbox=box, sandbox_mode="auto",
                       sanitizer_path=str(tool), infrastructure=mode)  # type: ignore[arg-type]
    result = job.run_one(honest, opts, None)
    return result, len(count.read_text()) if count.exists() else 0


@needs_bwrap
@pytest.mark.parametrize("box", BWRAP, ids=_ids(BWRAP))
def test_a_tool_that_crashes_once_is_run_again_and_judged(tmp_path: Path, box, crashing: Path,
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    green, crashed = _run(tmp_path, crashing, box, monkeypatch, crashes=1)
    assert crashed == 1
    assert green.status is Status.PASSED, (green.reason, green.findings)
    notes = [f.message for f in green.findings if f.kind == "retried"]
    assert len(notes) == 1 and notes[0] == "run 2 times: the first time, compute-sanitizer exited with code 139 with no report", notes
    # the twin: the same crash, then a run with the tool's errors, is red on those errors (a retry
    # is no way to lose a real report)
    red, _ = _run(tmp_path, crashing, box, monkeypatch, crashes=1, errors=True)
    assert red.status is Status.FAILED and "invalid-global-read" in {f.kind for f in red.findings}, red.findings


@needs_bwrap
@pytest.mark.parametrize("box", BWRAP, ids=_ids(BWRAP))
def test_a_tool_that_always_crashes_is_infrastructure_as_the_policy_says(tmp_path: Path, box, crashing: Path,
                                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    not_run, crashed = _run(tmp_path, crashing, box, monkeypatch, crashes=-1)
    assert crashed == infrastructure.ATTEMPTS[infrastructure.CRASH]  # the same job, three runs
    assert not_run.status is Status.NOT_RUN, (not_run.reason, not_run.findings)
    assert not_run.findings[0].kind == "infrastructure" and not_run.findings[0].severity is Severity.WARNING
    assert "the runner's tool failing, not the kernel" in (not_run.reason or "")
    assert not any(f.severity is Severity.ERROR for f in not_run.findings), not_run.findings
    # not_run decides: a warning where it says warn, blocking where it says fail (the default)
    record = RunRecord(results=[not_run])
    assert decide(record, Rules(not_run="warn")).passed
    assert not decide(record, Rules(not_run="fail")).passed
    failed, _ = _run(tmp_path, crashing, box, monkeypatch, crashes=-1, mode="fail")
    assert failed.status is Status.ERROR and failed.findings[0].kind == "infrastructure", failed.findings
    assert not decide(RunRecord(results=[failed]), Rules(not_run="warn")).passed


def _result(status: Status, *findings: Finding) -> JobResult:
    return JobResult(job_id="memcheck:s", check="memcheck", status=status, level="required", spec="s",
                     kernels=("k.cu",), findings=list(findings))


def test_only_the_tools_failures_count_as_infrastructure() -> None:
    crash = Finding("memcheck", "sanitizer-crash", "compute-sanitizer exited with code 139 and wrote no XML")
    assert infrastructure.tool_failure(_result(Status.ERROR, crash)) == crash
    # the kernel's own failures are not the tool's: a report, a timeout, a harness with no result
    for kind in ("invalid-global-read", "timeout", "no-result", "no-cuda"):
        assert infrastructure.tool_failure(_result(Status.ERROR, Finding("memcheck", kind, "x"))) is None
    # a base whose run under the tool crashed: the head's reports could not be compared
    base = Finding("memcheck", "differential", "not compared with the base's code", Severity.NOTE,
                   details={"base_failure": "sanitizer-crash"})
    assert infrastructure.tool_failure(_result(Status.FAILED, base)) == base
    assert infrastructure.attempts(base) == infrastructure.ATTEMPTS["sanitizer-crash"]
    # ... which, if it persists, leaves the head's reports as they are (counted new: fail closed)
    failed = _result(Status.FAILED, Finding("memcheck", "race", "r"), base)
    assert infrastructure.persistent(failed, base, 3, "not_run") is failed
