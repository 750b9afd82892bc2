"""A job's result as the gate writes it when the job itself could not: a crash, a timeout, an
interruption, a refusal, processes left behind, a sandbox that never started."""
from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any
from . import sandbox
from .. import proc
from ..findings import Finding, JobResult, Severity, Status
from ..protocol.jobs import Job
from .containment import TOOL_EXIT_GRACE_S, TOOL_START_LIMIT_S


# What a signal that killed a job's process most often means, for the finding's message.
_SIGNAL_CAUSE = {"SIGSEGV": " (a memory access outside what the process owns: an out-of-bounds read or write by "
                            "the code under test, or a native library's crash)",
                 "SIGBUS": " (a misaligned or unmapped memory access by the code under test)",
                 "SIGKILL": " (from outside the job: most often the kernel's out-of-memory killer, i.e. the runner "
                            "ran out of host memory)",
                 "SIGABRT": " (an abort: a failed assertion or an uncaught C++ exception in a native library)"}


def signal_cause(pr: proc.ProcResult) -> str:
    """`` (what the signal most often means)`` for a process a signal killed, else ``""``."""
    return _SIGNAL_CAUSE.get(pr.signal_name or "", "")


def _classify_failure(job: Job, pr: proc.ProcResult, timeout_s: float) -> tuple[str, str]:
    if pr.not_found:
        return "internal-error", f"could not start the job process: {pr.stderr.strip()}"
    if pr.timed_out:
        return "timeout", (f"the job did not finish within {timeout_s:.0f}s and was killed with its whole process "
                           f"group (a hang, a deadlock in the kernel, or too slow)")
    if pr.signal:
        return "crash", f"the job process died: {pr.describe()}{signal_cause(pr)}"
    return "crash", f"the job process exited with code {pr.returncode} without writing a result"


def _error_result(job: Job, kind: str, message: str, pr: proc.ProcResult | None) -> JobResult:
    tail = pr.tail(40) if pr else None
    f = Finding(check=job.check, kind=kind, message=message, severity=Severity.ERROR,
                spec=job.spec.id if job.spec else None, details={"stderr_tail": tail} if tail else {})
    status = Status.ERROR
    return JobResult(job_id=job.id, check=job.check, status=status, level=job.level,
                     spec=job.spec.id if job.spec else None, kernels=job.kernels, findings=[f],
                     duration_s=pr.duration_s if pr else 0.0, reason=message, log_tail=tail)


def _outcome_to_result(job: Job, outcome: Any, duration: float, log_tail: str | None) -> JobResult:
    return JobResult(job_id=job.id, check=job.check, status=outcome.status, level=job.level,
                     spec=job.spec.id if job.spec else None, kernels=job.kernels, findings=list(outcome.findings),
                     duration_s=duration, cases=outcome.cases, reason=outcome.reason, extra=outcome.extra.copy(),
                     log_tail=log_tail)


STUCK = "sandbox-stuck"


def _stuck_result(job: Job, roles: list[str], pr: proc.ProcResult, restarts: dict[str, int] | None = None) -> JobResult:
    """A job whose sandbox, watched by compute-sanitizer, never started its worker, however often it
    was started: nothing was checked (fails closed; :func:`run_one` tries such a job once more)."""
    starts = max((restarts or {}).get(r, 0) for r in roles) + 1
    res = _error_result(job, STUCK, f"the sandbox of the {' and '.join(roles)} worker did not start it within "
                        f"{TOOL_START_LIMIT_S:.0f}s under compute-sanitizer"
                        + (f", {starts} times in a row" if starts > 1 else "")
                        + " (its bwrap init hung in the tool's injected code, as seen on an H100), and was ended: "
                        "nothing was checked", pr)
    return dataclasses.replace(res, reason=f"{job.check} could not start its sandboxed worker")


def _with_sandbox_restarted(result: JobResult, restarts: dict[str, int]) -> JobResult:
    """A note that a sandbox watched by compute-sanitizer did not start its worker at first and was
    started again, on the same inputs, until it did: what was judged is the run that started."""
    roles = " and ".join(f"the {role}'s {_times(n)}" for role, n in sorted(restarts.items()))
    f = Finding(check=result.check, kind="retried", severity=Severity.NOTE, spec=result.spec,
                message=f"a sandbox watched by compute-sanitizer did not start its worker within "
                        f"{TOOL_START_LIMIT_S:.0f}s ({roles}; the tool's bwrap-init hang) and was started again "
                        f"on the same inputs: the run judged is the one that started",
                details={"sandbox_restarts": dict(sorted(restarts.items()))})
    return dataclasses.replace(result, findings=[*result.findings, f])


def _times(n: int) -> str:
    return {1: "once", 2: "twice"}.get(n, f"{n} times")


def _with_sandbox_ended(result: JobResult, ended: dict[str, int]) -> JobResult:
    """A note that a sandbox watched by compute-sanitizer did not end with its worker and the gate
    ended it (:class:`_ToolWatch`): the tool's report was read as ever; the note says why the job
    took :data:`TOOL_EXIT_GRACE_S` longer."""
    roles = " and ".join(f"the {role}'s ({n})" for role, n in sorted(ended.items()))
    f = Finding(check=result.check, kind="sandbox-ended", severity=Severity.NOTE, spec=result.spec,
                message=f"under compute-sanitizer, a sandbox did not end with its worker: gpu-gate killed the "
                        f"processes it left, {roles}, so that the tool could write its report (the job took up "
                        f"to {TOOL_EXIT_GRACE_S:.0f}s longer)")
    return dataclasses.replace(result, findings=[*result.findings, f])


def _with_escapes(result: JobResult, n: int, avail: sandbox.Available, unwatched: bool = False) -> JobResult:
    """A job that left processes running, or killed the sandbox's waiter that counts them: a
    blocking finding, whatever the check said (its result could have been written by them).
    Required whatever the job's level: an escape attempt is about the gate's integrity, not the
    kernel's quality."""
    how = ("they were killed with the sandbox's PID namespace" if avail.works
           else "they were found re-parented to the worker's reaper and killed")
    message = (f"the job left {n} process(es) running after its worker exited ({how}): code under "
               f"test must not outlive its job")
    if unwatched:
        message = ("a process of the job killed the sandbox's waiter, which counts the processes left "
                   "behind (everything in the sandbox was killed with it): code under test must not "
                   "tamper with its sandbox" + (f"; and {message}" if n else ""))
    f = Finding(check=result.check, kind="escaped-process", severity=Severity.ERROR, spec=result.spec,
                message=message)
    status = Status.FAILED if result.status is Status.PASSED else result.status
    return dataclasses.replace(result, status=status, level="required", findings=[*result.findings, f])


def _interrupted(job: Job, reason: str, pr: proc.ProcResult | None) -> JobResult:
    res = _error_result(job, "interrupted", f"{reason}: the job was killed before it finished", pr)
    return dataclasses.replace(res, reason=reason)


def _read_result(path: Path) -> JobResult | None:
    try:
        return JobResult.from_json(json.loads(path.read_text()))
    except (OSError, ValueError, KeyError, TypeError):
        return None


def _refused(job: Job, avail: sandbox.Available) -> JobResult:
    return JobResult(job_id=job.id, check=job.check, status=Status.NOT_RUN, level=job.level,
                     spec=job.spec.id if job.spec else None, kernels=job.kernels,
                     reason=f"not run: runner.sandbox is required and no sandbox works here ({avail.detail})")
