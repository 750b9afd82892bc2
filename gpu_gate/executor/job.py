"""One job, start to end: its directory, its sandbox, its judged run, and a sandbox that never started
tried again."""
from __future__ import annotations

import dataclasses
import shutil
import tempfile
from pathlib import Path
from . import sandbox
from ..judge.checks import CHECKS
from ..findings import Finding, JobResult, Severity, Status
from ..protocol.jobs import Job
from . import infrastructure
from .control import RunControl
from .. import scrub
from .judged import _run_judged
from .keep import keep
from .options import ExecOptions
from .results import _error_result, _refused


def run_one(job: Job, opts: ExecOptions, gpu: str | None, control: RunControl | None = None) -> JobResult:
    """One job, tried again where its sandbox never started; every text in its result that code under
    review could have written (messages, tracebacks, log tails) scrubbed of secrets and capped."""
    return scrub.result(_run_tried(job, opts, gpu, control))


def _run_tried(job: Job, opts: ExecOptions, gpu: str | None, control: RunControl | None) -> JobResult:
    info = CHECKS[job.check]
    if info.needs_gpu and gpu is None:
        return JobResult(job_id=job.id, check=job.check, status=Status.NOT_RUN, level=job.level,
                         spec=job.spec.id if job.spec else None, kernels=job.kernels,
                         reason=f"no GPU on this machine: {job.check} needs a CUDA device")
    control = control or RunControl()
    tries: list[str] = []
    while True:
        result = _run_one(job, opts, gpu, control)
        found = infrastructure.tool_failure(result)
        if found is None or control.reason is not None or len(tries) + 1 >= infrastructure.attempts(found):
            break
        # the tool's crashes and the sandbox hang came now and then, not every time: again, same inputs
        tries.append(infrastructure.first_line(found))
    if found is not None and control.reason is None:
        result = infrastructure.persistent(result, found, len(tries) + 1, opts.infrastructure)
    if not tries:
        return result
    times = "; ".join(f"{_ORDINAL[i]}, {m}" for i, m in enumerate(tries))
    note = Finding(check=job.check, kind="retried", severity=Severity.NOTE, spec=job.spec.id if job.spec else None,
                   message=f"run {len(tries) + 1} times: {times}")
    return dataclasses.replace(result, findings=[*result.findings, note])


_ORDINAL = ("the first time", "the second time", "the third time", "the fourth time", "the fifth time",
            "the sixth time", "the seventh time")


def _run_one(job: Job, opts: ExecOptions, gpu: str | None, control: RunControl) -> JobResult:
    # Two levels: the outer directory is the gate's (a sanitizer's targets, the count of
    # processes left behind); only the inner one is shown to the job, writable. The name is
    # tempfile's own, like any program's temporary directory.
    try:
        outer = Path(tempfile.mkdtemp(dir=opts.work_root))
        workdir = outer / "w"
        workdir.mkdir()
    except OSError as exc:
        return _error_result(job, "infrastructure", f"cannot create a job directory: {exc}", None)
    try:
        return _run_in(job, opts, gpu, workdir, control)
    finally:
        if opts.keep_workdirs is not None:
            keep(workdir, outer, opts.keep_workdirs / job.id.replace("/", "_").replace(":", "_"))
        shutil.rmtree(outer, ignore_errors=True)


def _run_in(job: Job, opts: ExecOptions, gpu: str | None, workdir: Path, control: RunControl) -> JobResult:
    avail = opts.sandbox or sandbox.choose(opts.sandbox_mode)
    if opts.sandbox_mode == "required" and not avail.works:
        return _refused(job, avail)
    # every check is judged: the compile check's worker compiles, as the others' run the code, in
    # a sandbox, and only the judge writes the result
    return _run_judged(job, opts, gpu, workdir, control, avail)
