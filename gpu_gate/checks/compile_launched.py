"""The compile check of the Triton specializations a spec's cases actually launched.

Real Triton kernels choose their constexprs at the call site, so the compile job, which
reads kernel files without running them, often knows no values for them ("not compiled:
no values known"). The equivalence job knows: on a GPU it records every launch (see
:mod:`gpu_gate.cuda.tritonlaunch`) and, after its cases, compiles each distinct launched
specialization of the spec's kernel files for the policy's target architectures (the
compile check's ``archs``, passed in the equivalence job's ``options["compile"]``) and
reports registers, spills and shared memory, gated by the compile check's limits. It runs
in the equivalence job because that is where the values exist: jobs are separate processes
and may run on separate runners.
"""
from __future__ import annotations

import os
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from ..cuda import tritonc
from ..cuda.nvcc import KernelResources
from ..cuda.tritonlaunch import Launch
from ..findings import Finding, Severity
from .compile import CHECK, DEFAULT_ARCHS, arch_number, normalise_archs, resource_findings_for

MAX_COMPILED = 16  # distinct specializations compiled per job (each one costs a compile per arch)
# Compiles at once: Triton's passes and ptxas run outside the GIL for most of their time. Measured on
# two cores, 16 compiles took 6.7 s one after another and 3.7 s on four threads; on an H100 runner
# this step was 6 s of the Liger GEGLU equivalence job, the last thing it does.
MAX_THREADS = 8


def repo_launches(launches: list[Launch], repo_root: Path, kernels: tuple[str, ...]) -> list[tuple[str, Launch]]:
    """(repo-relative file, launch) for the launches of the repository's own kernels; only
    the job's kernel files when it names any (the spec's changed kernels)."""
    root = repo_root.resolve()
    out = []
    for launch in launches:
        try:
            rel = Path(launch.file).resolve().relative_to(root).as_posix()
        except ValueError:
            continue  # a kernel of a library (torch's own Triton code, say): not under review
        if not kernels or rel in kernels:
            out.append((rel, launch))
    return out


def compile_launched(launches: list[tuple[str, Launch]], options: dict[str, Any]) -> tuple[list[Finding], list[dict[str, Any]]]:
    """Compile each launched specialization for the policy's archs: findings and resource rows."""
    archs = normalise_archs(options.get("archs") or DEFAULT_ARCHS)
    severity = Severity.ERROR if options.get("level", "required") == "required" else Severity.WARNING
    findings: list[Finding] = []
    resources: list[KernelResources] = []
    rows: list[dict[str, Any]] = []
    compilable = [(rel, launch) for rel, launch in launches if launch.fn is not None]
    configs = [(rel, launch, tritonc.launched_config(launch.fn, launch.constexprs, launch.signature, launch.options))
               for rel, launch in compilable[:MAX_COMPILED]]
    tasks = [(rel, launch, config, arch) for rel, launch, config in configs for arch in archs]

    def build(task: tuple[str, Launch, tritonc.TritonConfig, str]) -> tritonc.TritonBuild | Exception:
        _, launch, config, arch = task
        try:
            return tritonc.compile_kernel(launch.fn, config, arch_number(arch))
        except Exception as exc:  # noqa: BLE001 - Triton raises many types for a compile error
            return exc

    threads = max(1, min(MAX_THREADS, len(tasks), len(os.sched_getaffinity(0))))
    with ThreadPoolExecutor(threads) as pool:
        builds = list(pool.map(build, tasks))  # in the order of the tasks: the report does not depend on timing
    if threads > 1:  # a failure is reported only if it fails alone too: never one of compiling side by side
        builds = [build(task) if isinstance(built, Exception) else built for task, built in zip(tasks, builds)]
    for (rel, launch, _, arch), built in zip(tasks, builds):
        if isinstance(built, Exception):
            findings.append(_error(rel, launch, arch, built, severity))
            continue
        for r in built.resources:
            named = KernelResources(launch.function, r.symbol, arch, r.registers, r.spill_store, r.spill_load,
                                    r.local_bytes, r.shared_bytes, r.constant_bytes, r.barriers)
            resources.append(named)
            rows.append({"file": rel, "kernel": launch.function, "arch": arch, "constexprs": launch.constexprs,
                         "signature": launch.signature, "launches": launch.count, "registers": r.registers,
                         "spill_store": r.spill_store, "spill_load": r.spill_load, "local_bytes": r.local_bytes,
                         "shared_bytes": r.shared_bytes})
    if len(compilable) > MAX_COMPILED:
        findings.append(Finding(CHECK, "launches-not-compiled", f"{len(compilable) - MAX_COMPILED} more launched "
                                f"Triton specializations were not compiled (at most {MAX_COMPILED} per job)",
                                Severity.NOTE))
    return findings + resource_findings_for(options, resources), rows


def _error(rel: str, launch: Launch, arch: str, exc: Exception, severity: Severity) -> Finding:
    text = str(exc).strip().splitlines()
    first = next((t.strip() for t in reversed(text) if t.strip()), type(exc).__name__)
    values = ", ".join(f"{k}={v}" for k, v in launch.constexprs.items())
    return Finding(CHECK, "compile-error", f"{rel}: Triton kernel {launch.function}, as the cases launched it "
                   f"({values}), does not compile for {arch}: {first}", severity, file=rel,
                   details={"arch": arch, "constexprs": launch.constexprs, "signature": launch.signature,
                            "error": "\n".join(text[:40])})
