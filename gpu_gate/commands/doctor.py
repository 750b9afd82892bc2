"""``gpu-gate doctor``: is this machine fit to be a GPU runner?

It reads the driver and every GPU through NVML (:mod:`gpu_gate.nvml`), finds the
tools gpu-gate needs (compute-sanitizer, nvcc, torch, triton, cupy), and proves
that CUDA works through torch and through cupy with a tiny allocation, kernel and
synchronise. Those proofs run in a subprocess with a timeout, so a broken driver
can neither hang nor crash doctor.

The result is data (:class:`DoctorReport`). Every problem is one line; ``check``
turns them into infrastructure findings (:func:`infrastructure_findings`) and fails
closed on an unfit runner. A runner without a GPU is not fit.
"""
from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from ..executor import sandbox
from ..exitcodes import ExitCode
from ..findings import Finding, Severity
from . import output as out
from ..health.gpus import GpuExam, examine_gpus, visible_from_env
from ..health.model import NO_GPU, DoctorReport, GpuHealth, Thresholds, ToolInfo, ToolProbe
from ..health.tools import (CUDA_PROBES, ProbeResult, _binary_tool, collect_tools, failed_devices,
                            find_compute_sanitizer, probe_cuda, tool_notes, tool_problems)

__all__ = ["CUDA_PROBES", "NO_GPU", "DoctorReport", "GpuExam", "GpuHealth", "ProbeResult", "RunnerVerdict",
           "Thresholds", "ToolInfo", "_binary_tool", "collect_tools", "complete", "doctor_main", "examine_gpus",
           "find_compute_sanitizer", "format_report", "infrastructure_findings", "judge_runner", "probe_cuda",
           "run_doctor", "visible_from_env"]


def run_doctor(
    *,
    thresholds: Thresholds | None = None,
    nvml_lib: Any | None = None,
    tool_probe: ToolProbe | None = None,
    pycache: Path | None = None,
    visible: Sequence[str] | None = None,
    sandbox_probe: Callable[[], sandbox.Available] | None = None,
) -> DoctorReport:
    """Examine this machine. ``nvml_lib`` replaces ``pynvml`` and ``tool_probe`` the tool search (tests).
    ``pycache``: the run's shared bytecode directory, which the CUDA probes then fill for the jobs.
    ``visible``: the GPUs to examine, as CUDA_VISIBLE_DEVICES names them (indices or UUIDs);
    None: those CUDA_VISIBLE_DEVICES names, or every GPU where it is unset. The GPUs of other
    runners on the same host are none of this runner's business."""
    exam = examine_gpus(thresholds=thresholds, nvml_lib=nvml_lib, visible=visible)
    return complete(exam, tool_probe=tool_probe, pycache=pycache, sandbox_probe=sandbox_probe)


def complete(exam: GpuExam, *, tool_probe: ToolProbe | None = None, pycache: Path | None = None,
             sandbox_probe: Callable[[], sandbox.Available] | None = None) -> DoctorReport:
    """The second half: the tools (compute-sanitizer, CUDA through torch and CuPy), and the report."""
    t, gpus, tokens = exam.thresholds, exam.gpus, exam.tokens
    problems, notes = list(exam.problems), list(exam.notes)
    has_gpu = bool(gpus)
    tools = tool_probe(has_gpu, t) if tool_probe else collect_tools(has_gpu, t, pycache=pycache, visible=tokens)
    runner_wide = failed_devices(tools, gpus, tokens)
    for g in gpus:
        problems.extend(g.problems)
    if has_gpu:
        problems.extend(tool_problems(tools, t) + runner_wide)
    notes.extend(tool_notes(tools, t, has_gpu))
    box = (sandbox_probe or sandbox.probe)()
    if not box.works:
        notes.append("no sandbox works here: `check` runs jobs unsandboxed under runner.sandbox: auto (with a "
                     "warning) and runs none under runner.sandbox: required")
    elif box.kind == "unshare":
        notes.append("sandbox: unshare only (install bubblewrap for a private /tmp and /dev, and hidden rather than "
                     "read-only report and cache directories)")
    return DoctorReport(has_gpu, gpus, tools, problems, notes, exam.driver, exam.cuda, exam.on_host, tokens,
                        sandbox=f"{box.kind}: {box.detail}")


@dataclasses.dataclass
class RunnerVerdict:
    """What ``check`` makes of a doctor report: the GPUs it may use, and why not the others."""

    usable: list[str]  # CUDA_VISIBLE_DEVICES names of the healthy GPUs
    blocking: list[Finding]  # the runner is unfit: no job may start
    excluded: list[Finding]  # warnings: GPUs left out, the run goes on without them


def judge_runner(report: DoctorReport) -> RunnerVerdict:
    """A problem of one GPU among several leaves that GPU out: results from the healthy ones are
    sound. A problem of the whole runner (a tool, CUDA through torch or cupy, no GPU), or of a GPU
    that cannot be left out (CUDA_VISIBLE_DEVICES does not name it), makes it unfit."""
    per_gpu = {p for g in report.gpus for p in g.problems}
    runner_wide = [p for p in report.problems if p not in per_gpu]
    healthy = [g.cuda_id for g in report.gpus if not g.problems and g.cuda_id is not None]
    unnamed_bad = any(g.problems and g.cuda_id is None for g in report.gpus)
    if runner_wide or unnamed_bad or not healthy:
        return RunnerVerdict([], infrastructure_findings(report), [])
    excluded = [Finding(check="doctor", kind="infrastructure", severity=Severity.WARNING,
                        message=f"{p}; GPU {g.cuda_id} is left out of this run, the others run its jobs")
                for g in report.gpus for p in g.problems]
    return RunnerVerdict(healthy, [], excluded)


def infrastructure_findings(report: DoctorReport) -> list[Finding]:
    """One ERROR finding per problem, so that ``check`` fails closed on an unfit runner."""
    return [Finding(check="doctor", kind="infrastructure", message=p, severity=Severity.ERROR) for p in report.problems]


def format_report(report: DoctorReport, limits_from: str | None = None) -> str:
    lines = ["gpu-gate doctor"]
    if report.driver_version or report.cuda_driver_version:
        lines.append(f"driver {report.driver_version or '?'}, CUDA {report.cuda_driver_version or '?'} (driver API)")
    lines.append(f"limits: runner.health of {limits_from}" if limits_from else "limits: gpu-gate's defaults")
    if report.visible is not None and report.gpus_on_host:
        lines.append(f"examined: {len(report.gpus)} of the host's {report.gpus_on_host} GPU(s), as "
                     f"CUDA_VISIBLE_DEVICES={','.join(report.visible)} names them")
    for g in report.gpus:
        lines.extend(_format_gpu(g))
    if report.sandbox:
        lines.append(f"sandbox: {report.sandbox}")
    lines.append("tools:")
    for info in report.tools.values():
        lines.append("  " + _format_tool(info))
    if report.notes:
        lines.append("notes:")
        lines.extend(f"  {n}" for n in report.notes)
    if report.healthy:
        lines.append("healthy: this machine is fit to run gpu-gate")
    else:
        lines.append(f"NOT FIT: {len(report.problems)} problem(s):")
        lines.extend(report.problems)
    return "\n".join(lines)


def _na(v: object) -> str:
    return "n/a" if v is None else str(v)


def _format_gpu(g: GpuHealth) -> list[str]:
    procs = g.processes
    return [
        f"GPU {g.index}: {g.name}" + (f" ({g.uuid})" if g.uuid else ""),
        f"  memory      {_na(g.memory_free_mib)} MiB free of {_na(g.memory_total_mib)} MiB",
        f"  temperature {_na(g.temperature_c)} C",
        f"  clocks      {', '.join(g.throttle_reasons) or 'no slowdown'}",
        f"  ECC uncorr. {_na(g.ecc_uncorrected['volatile'])} volatile, {_na(g.ecc_uncorrected['aggregate'])} aggregate",
        f"  retired     sbe {_na(g.retired_pages['sbe'])}, dbe {_na(g.retired_pages['dbe'])}, "
        f"pending {_na(g.retired_pages['pending'])}",
        f"  row remap   {_na(g.row_remap['correctable'])} correctable, {_na(g.row_remap['uncorrectable'])} "
        f"uncorrectable, pending {_na(g.row_remap['pending'])}, failure {_na(g.row_remap['failure'])}",
        f"  processes   {'n/a' if procs is None else (len(procs) or 'none')}",
    ]


def _format_tool(info: ToolInfo) -> str:
    text = f"{info.name:<18} {info.version or 'missing'}"
    if info.path:
        text += f"  {info.path}"
    if info.detail:
        text += f"  ({info.detail})"
    return text


def doctor_main(json_output: bool, *, nvml_lib: Any | None = None, tool_probe: ToolProbe | None = None,
                thresholds: Thresholds | None = None, limits_from: str | None = None) -> int:
    """``gpu-gate doctor [--json]``: print the report; 0 when fit, 1 with one line per problem.
    ``limits_from``: the policy that ``thresholds`` come from, to say so."""
    report = run_doctor(thresholds=thresholds, nvml_lib=nvml_lib, tool_probe=tool_probe)
    if json_output:
        print(json.dumps({**report.to_json(), "limits_from": limits_from}, indent=2))
    else:
        print(format_report(report, limits_from))
    return int(ExitCode.PASSED if report.healthy else ExitCode.POLICY_BREACHED)


def run(*, json_output: bool = False, policy: Path | None = None) -> int:
    """``gpu-gate doctor``: the report (with ``-q``, the problems and one verdict line)."""
    thresholds, source = _limits(policy)
    if json_output or not out.quiet():
        return doctor_main(json_output=json_output, thresholds=thresholds, limits_from=source)
    report = run_doctor(thresholds=thresholds)  # -q: the problems and one verdict line
    for problem in report.problems:
        out.error(f"doctor: {problem}")
    out.verdict("doctor: healthy" if report.healthy else f"doctor: unfit, {len(report.problems)} problem(s)")
    return int(ExitCode.PASSED if report.healthy else ExitCode.POLICY_BREACHED)


def _limits(policy: Path | None) -> tuple[Thresholds | None, str | None]:
    """The repository's `runner.health` (``policy``, else the .gpu-gate.yml of the git checkout
    around the current directory), so that doctor judges a GPU as `check` will; else the
    built-in limits. Without a policy list of tools, doctor requires every tool."""
    from .. import git
    from ..errors import GitError
    from ..policy import load_policy
    from .vet import health_limits

    try:
        repo: Path | None = git.repo_root(Path.cwd())
    except GitError:
        repo = None
    if policy is None and (repo is None or not any((repo / n).is_file() for n in (".gpu-gate.yml", ".gpu-gate.yaml"))):
        return None, None
    loaded = load_policy(repo or Path.cwd(), policy)
    for w in loaded.warnings:
        out.warn(w)
    return health_limits(loaded.policy, None), loaded.source
