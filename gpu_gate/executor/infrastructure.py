"""Failures of the runner's tools, not of the kernel: told apart, run again on the same inputs,
and, where they persist, reported as ``infrastructure`` as the policy says.

Measured on H200s: compute-sanitizer crashed (exit code 139, no report) in about 3 of 70 sanitizer
jobs, and a sandbox watched by the tool never started its worker in 1 (the bwrap-init hang, see
:class:`gpu_gate.executor.containment._ToolWatch`); each failed closed, and an honest change was
red. Both come now and then, not every time, so a run again on the same job (same seed, same cases)
usually checks what the first could not. A kernel cannot hide behind this: the equivalence and
determinism jobs run the same code without the tool, and a crash there is the kernel's."""
from __future__ import annotations

import dataclasses
from typing import Literal

from ..findings import Finding, JobResult, Severity, Status
from .containment import STUCK_ATTEMPTS
from .results import STUCK

Mode = Literal["fail", "not_run"]

CRASH = "sanitizer-crash"
INFRASTRUCTURE = "infrastructure"

# How many runs in all before a failure of the tool counts as persistent. A stuck sandbox is started
# again inside the run first (containment.SANDBOX_STARTS times), so a run whose sandbox never started
# is rare, and one more run is enough; a crash costs a whole run.
ATTEMPTS = {STUCK: STUCK_ATTEMPTS, CRASH: 3}

_WHAT = {STUCK: "its sandbox, watched by compute-sanitizer, never started the worker",
         CRASH: "compute-sanitizer itself crashed and wrote no report"}


def tool_failure(result: JobResult) -> Finding | None:
    """The finding that says the tool, not the kernel, failed this run: a crash of the tool, a
    sandbox that never started; or, in a differential run, the base's run under the tool failing so
    (its reports could not be compared, and every report of the head's then counts as new)."""
    if result.status is Status.ERROR:
        return next((f for f in result.findings if f.kind in ATTEMPTS), None)
    if result.status is Status.FAILED:
        return next((f for f in result.findings
                     if f.kind == "differential" and f.details.get("base_failure") in ATTEMPTS), None)
    return None


def attempts(found: Finding) -> int:
    return ATTEMPTS.get(found.kind, ATTEMPTS.get(str(found.details.get("base_failure")), 1))


def first_line(found: Finding) -> str:
    """What the failure was, in a few words (the tool's command line and output stay in its finding)."""
    if found.kind == CRASH and (found.details.get("signal") or found.details.get("returncode") is not None):
        how = (f"died of signal {found.details['signal']}" if found.details.get("signal")
               else f"exited with code {found.details['returncode']}")
        return f"compute-sanitizer {how} with no report"
    return found.message.splitlines()[0] if found.message else found.kind


def persistent(result: JobResult, found: Finding, runs: int, mode: Mode) -> JobResult:
    """A job whose every run met a failure of the tool. ``fail``: an error (blocking where the check
    is required), named ``infrastructure``. ``not_run``: the check is not run, with the reason, and
    the policy's ``not_run`` decides; what the runs reported is kept as warnings. A base whose run
    failed so leaves the head's reports as they are: they are the head's, counted new (fail closed)."""
    if found.kind not in ATTEMPTS:
        return result
    what = _WHAT[found.kind]
    reason = (f"{result.check} could not check the kernel: in {runs} run(s) on the same inputs, {what} "
              f"({first_line(found)}). This is the runner's tool failing, not the kernel")
    if mode == "fail":
        f = Finding(check=result.check, kind=INFRASTRUCTURE, severity=Severity.ERROR, spec=result.spec,
                    message=reason + " (runner.infrastructure: fail)", details={"tool_failure": found.kind})
        return dataclasses.replace(result, status=Status.ERROR, reason=reason, findings=[f, *result.findings])
    f = Finding(check=result.check, kind=INFRASTRUCTURE, severity=Severity.WARNING, spec=result.spec,
                message=reason + "; the policy's not_run decides (runner.infrastructure: not_run)",
                details={"tool_failure": found.kind})
    kept = [dataclasses.replace(x, severity=Severity.WARNING) if x.severity is Severity.ERROR else x
            for x in result.findings]
    return dataclasses.replace(result, status=Status.NOT_RUN, reason=reason, findings=[f, *kept])
