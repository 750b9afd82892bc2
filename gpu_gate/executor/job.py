"""One job, start to end: its directory, its sandbox, the judged run or the job file's run, the base's
compile for a pull request, and a sandbox that never started tried again."""
from __future__ import annotations

import dataclasses
import json
import os
import shutil
import tempfile
import time
from pathlib import Path
from . import sandbox
from ..judge.checks import CHECKS
from ..findings import Finding, JobResult, Severity, Status
from ..protocol.jobs import Job
from ..protocol.jobs import base_commit
from .argv import _context, _env_for, worker_argv
from . import infrastructure
from .containment import Contained, _contained_run
from .control import RunControl
from .. import scrub
from .judged import _run_judged
from .keep import keep
from .options import ExecOptions, concurrency
from .results import _error_result, _interrupted, _judge_run, _read_result, _refused, _with_escapes


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
    if CHECKS[job.check].scope == "spec":
        return _run_judged(job, opts, gpu, workdir, control, avail)
    try:
        job_file, result_file = _job_file(job, opts, gpu, workdir)
    except OSError as exc:
        return _error_result(job, "infrastructure", f"cannot write the job file ({exc}): no disk space left?", None)
    # A job never outlives the whole run's deadline.
    timeout = max(1.0, min(opts.timeout_s, opts.run_deadline - time.monotonic()))
    pr, escaped, unwatched, *_ = _run_job_file(job, opts, gpu, workdir, job_file, result_file, control, avail, timeout)
    if control.reason is not None and (pr.signal == 9 or pr.timed_out or pr.returncode is None):
        return _interrupted(job, control.reason, pr)
    inner = _read_result(result_file)
    result = _judge_run(job, opts, pr, inner, timeout)
    if escaped or unwatched:
        return _with_escapes(result, escaped, avail, unwatched)
    commit = base_commit(job)
    if job.check == "compile" and commit and opts.base_root is not None and result.status is not Status.ERROR:
        from ..judge.checks.compiled_base import against_base

        left = max(1.0, min(opts.timeout_s, opts.run_deadline - time.monotonic()))  # within the run's deadline
        result = against_base(job, result, _compile_at_base(job, opts, gpu, workdir, control, avail, left), commit)
    return result


def _compile_at_base(job: Job, opts: ExecOptions, gpu: str | None, workdir: Path, control: RunControl,
                     avail: sandbox.Available, timeout: float) -> JobResult | None:
    """The same compile job on the base's tree (a pull request), in a sandbox of its own, so that
    the findings read from the head's compiled code can be told new from pre-existing. None where
    it produced no result, or left processes behind (then nothing it wrote is read)."""
    from ..protocol.archs import DEFAULT_ARCHS, lint_arch, normalise_archs

    # only the architecture whose PTX is read: the base's resources and compile errors are not compared
    job = dataclasses.replace(job, options={
        **job.options, "archs": [lint_arch(normalise_archs(job.options.get("archs") or DEFAULT_ARCHS))]})
    bdir = workdir.parent / "b"
    remap = avail.protects_files  # in a sandbox the base's tree is shown at the repository's path
    assert opts.base_root is not None
    wopts = opts if remap else dataclasses.replace(opts, repo_root=opts.base_root)
    try:
        bdir.mkdir(exist_ok=True)
        job_file, result_file = _job_file(job, wopts, gpu, bdir)
    except OSError:
        return None
    pr, escaped, unwatched, *_ = _run_job_file(job, wopts, gpu, bdir, job_file, result_file, control, avail, timeout,
                                               source=opts.base_root if remap else None)
    if escaped or unwatched or pr.timed_out:
        return None
    return _read_result(result_file)


def _job_file(job: Job, opts: ExecOptions, gpu: str | None, workdir: Path) -> tuple[Path, Path]:
    """Write the job file of a job worker into ``workdir``: its path and the result file's. Raises
    OSError where it cannot be written."""
    job_file, result_file = workdir / "in.json", workdir / "out.json"
    job_file.write_text(json.dumps({"job": job.to_json(), "context": _context(opts, gpu, job)}))
    return job_file, result_file


def _run_job_file(job: Job, opts: ExecOptions, gpu: str | None, workdir: Path, job_file: Path, result_file: Path,
                  control: RunControl, avail: sandbox.Available, timeout: float, source: Path | None = None
                  ) -> Contained:
    """A job worker on ``job_file``, contained (the head's tree, or ``source`` shown at the
    repository's path); the result file is read by the caller, once it knows nothing escaped."""
    threads = max(1, (os.cpu_count() or 2) // concurrency(opts))
    env = _env_for(opts, gpu, workdir, threads, job.check, avail)
    return _contained_run(worker_argv(opts, job_file, result_file), opts, gpu, workdir, env, timeout, avail, control,
                          source=source)
