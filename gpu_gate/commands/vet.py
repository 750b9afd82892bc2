"""Vetting the runner before its jobs run on it: the tools the jobs need, the doctor's thresholds
from the policy, and the doctor's verdict (before the jobs on several GPUs; beside the first jobs on
one, :class:`DoctorBeside`). An unhealthy GPU is left out; an unfit runner runs no job."""
from __future__ import annotations

import dataclasses
import time
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from . import output as out

if TYPE_CHECKING:
    from ..executor.control import RunControl
    from ..health.model import DoctorReport, Thresholds
    from ..policy import Policy
    from ..protocol.jobs import Job
    from .doctor import RunnerVerdict


def tools_needed(jobs: Sequence[Job]) -> tuple[str, ...]:
    """What a runner must have for these jobs: torch always; the tool a check runs under
    (compute-sanitizer); triton for Triton kernels; cupy (gg.cuda) for CUDA kernels, and nvcc for
    a check that builds them."""
    from ..judge.checks import check_info
    from ..cudascan import is_c_source

    infos = [(j, check_info(j.check)) for j in jobs]
    kernels = [k for j in jobs for k in j.kernels]
    need = ["torch"]
    need += sorted({info.tool for _, info in infos if info is not None and info.tool is not None})
    if any(k.endswith(".py") for k in kernels):
        need.append("triton")
    if any(is_c_source(k) for k in kernels):
        need.append("cupy")
    if any(info is not None and info.compiler.builds and any(is_c_source(k) for k in j.kernels) for j, info in infos):
        need.append("nvcc")
    return tuple(need)


def health_limits(policy: Policy, tools: tuple[str, ...] | None) -> Thresholds:
    """The doctor's thresholds from the policy's `runner.health`. The tools it requires: the
    policy's list, else ``tools`` (what the jobs use), else the doctor's own default (all)."""
    from ..health.model import Thresholds

    health = policy.runner.health
    limits = Thresholds(max_temperature_c=health.max_temperature_c, min_free_memory_mib=health.min_free_memory_mib,
                        allow_other_processes=health.allow_other_processes)
    required = tuple(health.required_tools) if health.required_tools is not None else tools
    return dataclasses.replace(limits, required_tools=required) if required is not None else limits


def vet_runner(gpus: tuple[str, ...], pycache: Path | None, policy: Policy, jobs: Sequence[Job]) -> RunnerVerdict:
    """Before the first job on a GPU runner: refuse to trust an unhealthy GPU. The doctor examines
    the GPUs this run would use, with the policy's thresholds; a GPU with a problem is left out,
    and a runner with no healthy GPU, or with a problem of its own, is unfit (a blocking finding
    per problem)."""
    from .doctor import judge_runner, run_doctor

    thresholds = health_limits(policy, tools_needed(jobs))
    start = time.monotonic()
    report = run_doctor(thresholds=thresholds, pycache=pycache, visible=gpus)
    verdict = judge_runner(report)
    say_verdict(report, verdict, time.monotonic() - start)
    return verdict


def say_verdict(report: DoctorReport | None, verdict: RunnerVerdict, took: float,
                unfit: str = "its GPU jobs will not run:") -> None:
    """The doctor's verdict, in the run's log: unfit and why (then ``unfit``: what becomes of the
    jobs), or the healthy GPUs and any left out."""
    if verdict.blocking:
        out.say(f"doctor: this runner is unfit, {len(verdict.blocking)} problem(s) in {took:.1f}s; {unfit}")
        for f in verdict.blocking:
            out.say(f"  - {f.message}")
        return
    if report is None:
        return
    names = ", ".join(sorted({g.name or "unknown GPU" for g in report.gpus if not g.problems}))
    out.say(f"doctor: {len(verdict.usable)} GPU(s) healthy ({names}) in {took:.1f}s")
    for f in verdict.excluded:
        out.say(f"doctor: {f.message}")


class DoctorBeside:
    """The doctor on a one-GPU runner, beside the first jobs: the GPU's own health (NVML:
    temperature, memory, ECC, other processes) is examined before any job starts, since the jobs'
    processes would then count as other processes; the tools' probes (compute-sanitizer, CUDA
    through torch and CuPy: seconds) run on a thread while the jobs start. A runner they find unfit
    has its jobs cancelled at once, and every job is reported not run, as if none had started: no
    result from an unfit runner is ever kept or judged."""

    REASON = "the runner failed its health check"

    def __init__(self, gpus: tuple[str, ...], pycache: Path | None, policy: Policy, jobs: Sequence[Job],
                 control: RunControl) -> None:
        import threading

        from . import doctor

        self.control = control
        self.thresholds = health_limits(policy, tools_needed(jobs))
        self.start = time.monotonic()
        self.exam = doctor.examine_gpus(thresholds=self.thresholds, visible=gpus)
        self.pycache = pycache
        self._verdict: RunnerVerdict | None = None
        self.now: RunnerVerdict | None = None  # a verdict before any job: the GPU itself has a problem
        if self.exam.problems or any(g.problems for g in self.exam.gpus):
            self._finish(started=False)
            self.now = self._verdict
            return
        self._thread = threading.Thread(target=self._finish, name="gpu-gate-doctor", daemon=True)
        self._thread.start()

    def _finish(self, started: bool = True) -> None:
        from . import doctor
        from ..findings import Finding, Severity

        try:
            report = doctor.complete(self.exam, pycache=self.pycache)
            verdict = doctor.judge_runner(report)
        except Exception as exc:  # noqa: BLE001 - a doctor that cannot say is not a healthy runner
            report = None
            verdict = doctor.RunnerVerdict([], [Finding(check="doctor", kind="infrastructure", severity=Severity.ERROR,
                                                        message=f"the runner's health check failed: {exc}")], [])
        if verdict.blocking:
            self.control.cancel(self.REASON)
        say_verdict(report, verdict, time.monotonic() - self.start,
                     *(["its jobs are stopped and reported not run:"] if started else []))
        self._verdict = verdict

    def verdict(self) -> RunnerVerdict:
        from . import doctor
        from ..findings import Finding, Severity

        if self._verdict is None:
            self._thread.join()
        if self._verdict is None:  # it could not say: fail closed
            return doctor.RunnerVerdict([], [Finding(check="doctor", kind="infrastructure", severity=Severity.ERROR,
                                                     message="the runner's health check did not finish")], [])
        return self._verdict
