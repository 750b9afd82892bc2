"""The judge's process: ``python -I -m gpu_gate.judge.job JOB.json RESULT.json``.

It runs one check, asking the job's workers (which import the code under review, in their
sandboxes) over the channels the executor made, and writes a JobResult as JSON. The
executor treats a crash, a signal, a timeout or a missing result file as a
finding, so anything that goes wrong here ends this job only.

The job file carries the job and its context (repository, device, time budget, the
sanitizer wrapping this process): nothing in the environment says gpu-gate is here.
"""
from __future__ import annotations

import dataclasses
import json
import os
import sys
import time
import traceback
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .checks import CHECKS
from ..findings import Finding, JobResult, Severity, Status
from ..job_extra import JobExtra
from ..protocol.jobs import Job

if TYPE_CHECKING:
    from .channel import Channel
    from .checks import CheckInfo
    from .workers import Workers


@dataclasses.dataclass
class Context:
    repo_root: Path
    device: str  # "cuda" or "cpu"
    workdir: Path
    sanitizer: str | None = None  # the compute-sanitizer tool wrapping the candidate's worker, if any
    deadline: float = float("inf")  # time.monotonic() by which the check should wrap up
    channels: dict[str, Channel] | None = None  # role -> the judge's channel to that worker; None: in this process
    workers: Workers | None = None  # the job's workers, once the spec imported in them
    base_root: Path | None = None  # the base's tree, in a pull request (the compile check reads its kernel files)
    # the disguised replay's programs, by side (see judge.disguised), as the executor prepared them; or
    # a string: why it could not; None: not prepared (the workers run in this process)
    disguised: dict[str, Any] | str | None = None

    def open_workers(self, job: Job) -> Workers:
        """The candidate and reference workers with the job's spec imported (again, for a job whose
        spec changed), over the channels the executor made (:mod:`gpu_gate.inprocess` makes them to
        workers in this process, for tests and a library's own test suite)."""
        from .workers import connect

        if self.channels is None:
            self.channels = self.local_channels()
        self.workers = connect(job, self.channels, self.device, self.deadline)
        return self.workers

    def open_compilers(self, job: Job) -> dict[str, Channel]:
        """The compile check's channels: to its ``compiler`` worker and, in a pull request, to the
        ``base`` worker on the base's tree (the executor's), or to a worker in this process
        (:mod:`gpu_gate.inprocess`)."""
        if self.channels is None:
            self.channels = self.local_compile_channels(job)
        return self.channels

    def local_compile_channels(self, job: Job) -> dict[str, Channel]:
        raise RuntimeError("the judge has no channel to a compile worker: the executor starts it in its sandbox "
                           "(gpu_gate.executor); gpu_gate.inprocess runs it in the caller's process")

    def close_workers(self) -> None:
        for channel in (self.channels or {}).values():
            channel.close()
            worker = getattr(channel, "worker", None)
            if worker is not None:
                worker.close()
        self.channels = None

    def local_channels(self) -> dict[str, Channel]:
        raise RuntimeError("the judge has no channels to its workers: the executor starts them in their sandboxes "
                           "(gpu_gate.executor); gpu_gate.inprocess runs them in the caller's process")

    @property
    def triton_interpret(self) -> bool:
        return os.environ.get("TRITON_INTERPRET") == "1"


@dataclasses.dataclass
class Outcome:
    status: Status
    findings: list[Finding] = dataclasses.field(default_factory=list)
    cases: int = 0
    reason: str | None = None
    extra: JobExtra = dataclasses.field(default_factory=JobExtra)


def pick_device() -> str:
    try:
        import torch
    except ImportError:
        return "cpu"
    return "cuda" if torch.cuda.is_available() else "cpu"


def _run_check(info: CheckInfo, job: Job, ctx: Context) -> Outcome:
    from .channel import ProtocolViolation, WorkerTimeout
    from .workers import ContextLost, SpecDidNotImport, WorkerDied

    try:
        outcome: Outcome = info.load().run(job, ctx)
    except SpecDidNotImport as exc:
        outcome = Outcome(Status.ERROR, [exc.finding], reason=exc.finding.message.split(" (")[0])
    except ProtocolViolation as exc:
        outcome = _protocol(job, exc)
    except WorkerTimeout as exc:
        f = Finding(check=job.check, kind="timeout", spec=job.spec.id if job.spec else None,
                    message=f"{exc}; its worker was killed")
        outcome = Outcome(Status.ERROR, [f], reason="timeout")
    except WorkerDied as exc:
        f = Finding(check=job.check, kind="crash", spec=job.spec.id if job.spec else None,
                    message=str(exc))
        outcome = Outcome(Status.ERROR, [f], reason="crash")
    except ContextLost as exc:
        f = Finding(check=job.check, kind="cuda-error", spec=job.spec.id if job.spec else None,
                    message=f"the candidate's worker was lost: {exc}")
        outcome = Outcome(Status.FAILED, [f], reason="worker lost")
    return outcome


def _protocol(job: Job, exc: Exception) -> Outcome:
    """A worker broke the protocol (see :mod:`.channel`): the job fails closed, saying which worker
    and what it sent."""
    f = Finding(check=job.check, kind="protocol", spec=job.spec.id if job.spec else None,
                message=f"{exc}; the job fails closed (code under review runs in that worker's process)")
    return Outcome(Status.ERROR, [f], reason="protocol")


def _isolation_note(job: Job, ctx: Context) -> list[Finding]:
    ref = getattr(ctx.workers, "reference", None)
    if ref is None or ref.isolated or ctx.channels is None or not isinstance(ref.why, str):
        return []
    if getattr(ref, "tree", "head") == "base":
        return [Finding(check=job.check, kind="reference-not-isolated", severity=Severity.NOTE,
                        spec=job.spec.id if job.spec else None,
                        message=f"the spec's reference needs the repository's code ({ref.why}): it ran in a "
                                f"sandboxed worker of its own that imported that code from the base's tree, never "
                                f"the head's")]
    return [Finding(check=job.check, kind="reference-not-isolated", severity=Severity.NOTE,
                    spec=job.spec.id if job.spec else None,
                    message=f"the spec's reference could not be computed apart from the code under review ({ref.why}): "
                            f"it ran in a sandboxed worker of its own that imported the repository's code")]


def _late_settings_note(job: Job, ctx: Context) -> list[Finding]:
    """Settings of CUDA or torch's CUDA allocator that the spec's import set after the worker had
    created its CUDA context (see worker.serve.CudaContext): the cases ran without them."""
    late = getattr(ctx.workers, "late_cuda_settings", None)
    if not late:
        return []
    names = ", ".join(sorted(late)[:8])
    return [Finding(check=job.check, kind="late-cuda-settings", severity=Severity.WARNING,
                    spec=job.spec.id if job.spec else None,
                    message=f"the spec's import set {names} after the worker had created its CUDA context, so the "
                            f"cases ran without it: set it in the runner's environment (the job's env), not at import")]


def _adapted_note(job: Job, used: object) -> list[Finding]:
    """What the Triton interpreter had to be adapted for to run the spec's kernels on the CPU (the
    candidate's worker says which adaptations its launches needed: see worker.interpreter)."""
    from ..protocol.interpreter import ADAPTATIONS

    if not isinstance(used, dict):
        return []
    parts = []
    for name, what in ADAPTATIONS.items():
        seen = used.get(name)
        if isinstance(seen, (list, tuple)) and seen:
            names = ", ".join(str(n)[:60] for n in seen[:6]) + (", ..." if len(seen) > 6 else "")
            parts.append(f"{name} ({names}): {what}")
    if not parts:
        return []
    return [Finding(check=job.check, kind="interpreter-adapted", severity=Severity.NOTE,
                    spec=job.spec.id if job.spec else None,
                    message="the Triton interpreter (no GPU) was adapted to run these kernels as a GPU does: "
                            + "; ".join(parts), details={"adaptations": sorted(n for n in used if n in ADAPTATIONS)})]


def run_job(job: Job, ctx: Context) -> JobResult:
    from ..rules import judging
    from .channel import ProtocolViolation

    start = time.monotonic()
    info = CHECKS[job.check]
    launched: dict[str, object] | None = None
    uncompiled: tuple[str, ...] | None = None
    try:
        outcome = _run_check(info, job, ctx)
        why = judging.signature_broke(job, outcome.findings)
        if why is not None:  # the base's spec no longer fits the head: as the head's spec allows, and the job says so
            outcome = judging.fall_back(job, why, lambda again: _run_check(info, again, ctx))
            if outcome.status is Status.PASSED and any(f.severity is Severity.ERROR for f in outcome.findings):
                outcome.status = Status.FAILED
        if ctx.workers is not None and outcome.status in (Status.PASSED, Status.FAILED):
            outcome.findings += _isolation_note(job, ctx) + _late_settings_note(job, ctx)
            try:
                finished = ctx.workers.finish()
                launched = dict(finished.launches) if finished.launches is not None else None
                uncompiled = finished.uncompiled
                outcome.findings += _adapted_note(job, finished.interpreter_adapted)
            except ProtocolViolation as exc:
                outcome = _protocol(job, exc)
            except Exception:  # noqa: BLE001 - a worker lost at the end: no coverage record, nothing else lost
                launched = None
    finally:
        ctx.close_workers()
    if job.spec is not None and outcome.status in (Status.PASSED, Status.FAILED) and isinstance(launched, dict):
        # What the spec really launched: the judge's coverage map (gpu_gate.coverage).
        outcome.extra.launches = launched
    if uncompiled:
        # What the worker imported without bytecode: the gate may compile the runner's own files
        # among them for later runs (gpu_gate.store.bytecode), and drops this from the result.
        from ..store.bytecode import MAX_FILES

        outcome.extra.bytecode_missing = list(uncompiled[:MAX_FILES])
    return JobResult(
        job_id=job.id, check=job.check, status=outcome.status, level=job.level,
        spec=job.spec.id if job.spec else None, kernels=job.kernels, findings=outcome.findings,
        duration_s=time.monotonic() - start, cases=outcome.cases, reason=outcome.reason, extra=outcome.extra)


def _error(job: Job, kind: str, message: str) -> JobResult:
    return JobResult(job_id=job.id, check=job.check, status=Status.ERROR, level=job.level,
                     spec=job.spec.id if job.spec else None, kernels=job.kernels, reason=message,
                     findings=[Finding(check=job.check, kind=kind, spec=job.spec.id if job.spec else None,
                                       message=message)])


def read_job(path: Path) -> tuple[Job, dict[str, Any]]:
    """The job and its context from the executor's job file ``{"job": ..., "context": ...}``.
    A bare job (written by hand) takes its context from the GPU_GATE_* variables, or defaults."""
    data = json.loads(path.read_text())
    if "job" in data:
        return Job.from_json(data["job"]), dict(data.get("context") or {})
    env = os.environ
    return Job.from_json(data), {"repo_root": env.get("GPU_GATE_REPO_ROOT"), "device": env.get("GPU_GATE_DEVICE"),
                                 "budget_s": env.get("GPU_GATE_JOB_BUDGET_S"), "sanitizer": env.get("GPU_GATE_SANITIZER")}


def _socket_channels(fds: object) -> dict[str, Channel] | None:
    """The judge's ends of the socket pairs the executor made, one per worker it started."""
    import socket

    from .channel import SocketChannel

    if not isinstance(fds, dict):
        return None
    return {role: SocketChannel(socket.socket(fileno=int(fd)), role) for role, fd in fds.items()}


def main(argv: list[str] | None = None, context_type: type[Context] = Context) -> int:
    """``context_type``: the judge's context class (:mod:`gpu_gate.inprocess` passes one whose workers run in
    this process)."""
    argv = sys.argv[1:] if argv is None else argv
    if len(argv) != 2:
        print("usage: python -m gpu_gate.judge.job JOB.json RESULT.json", file=sys.stderr)
        return 2
    job, given = read_job(Path(argv[0]))  # ``context_type`` is the class: what the job file gives is ``given``
    out = Path(argv[1])
    repo = Path(given.get("repo_root") or os.getcwd())
    budget = float(given.get("budget_s") or "inf")
    device = given.get("device") or pick_device()
    ctx = context_type(repo_root=repo, device=device, workdir=out.parent,
                       sanitizer=given.get("sanitizer") or None, deadline=time.monotonic() + budget,
                       channels=_socket_channels(given.get("channels")),
                       base_root=Path(given["base_root"]) if given.get("base_root") else None,
                       disguised=given.get("disguised") or given.get("disguised_error") or None)
    limit = None
    if ctx.channels is not None:  # the judge of sandboxed workers: what they send cannot exhaust the runner
        from .limits import limit_memory

        limit = limit_memory(job.options, device)
    try:
        result = run_job(job, ctx)
    except MemoryError:
        result = _error(job, "judge-memory", f"the judge reached the memory limit it sets itself "
                                             f"({(limit or 0) / (1 << 30):.1f} GiB of data) and stopped")
    except Exception as exc:  # noqa: BLE001 - report, do not lose the job
        result = JobResult(job_id=job.id, check=job.check, status=Status.ERROR, level=job.level,
                           spec=job.spec.id if job.spec else None, kernels=job.kernels,
                           reason=f"internal error in gpu-gate: {type(exc).__name__}: {exc}",
                           findings=[Finding(check=job.check, kind="internal-error", severity=Severity.ERROR,
                                             spec=job.spec.id if job.spec else None,
                                             message=f"internal error in gpu-gate ({type(exc).__name__}: {exc}); "
                                                     f"if you see this, please report it",
                                             details={"traceback": traceback.format_exc()})])
    tmp = out.with_suffix(".tmp")
    tmp.write_text(json.dumps(result.to_json()))
    os.replace(tmp, out)
    return 0


if __name__ == "__main__":
    # Run through the importable module, not __main__, so the exception classes the
    # checks raise are the same objects this module catches.
    from gpu_gate.judge.job import main as _main

    sys.exit(_main())
