"""In the candidate's worker: compile the Triton specializations the cases launched, for the compile
check's architectures, and report what came out, as facts.

Real Triton kernels choose their constexprs at the call site, so the compile job, which reads kernel
files without running them, often knows no values for them. The equivalence job's candidate worker
does: it recorded every launch (see :mod:`gpu_gate.worker.tritonlaunch`), and the launched ``JITFunction``
objects exist only in its process. So it compiles them here, after the cases, and answers with the
resources of each compiled kernel and the text of each compiler error. What they mean (an error's
severity, a resource over the policy's limits) is the judge's decision, in
:mod:`gpu_gate.judge.checks.compile_launched`; nothing here imports it.
"""
from __future__ import annotations

import dataclasses
import os
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

from . import tritonc
from ..protocol.archs import arch_number, lint_arch
from .tritonlaunch import Launch

if TYPE_CHECKING:
    from .tritonc import JitFunction

MAX_COMPILED = 16  # distinct specializations compiled per job (each one costs a compile per arch)
# Compiles at once: Triton's passes and ptxas run outside the GIL for most of their time. Measured on
# two cores, 16 compiles took 6.7 s one after another and 3.7 s on four threads; on an H100 runner
# this step was 6 s of the Liger GEGLU equivalence job, the last thing it does.
MAX_THREADS = 8
ERROR_LINES = 40
PTX_BYTES = 24 << 20  # PTX sent to the judge per job, in all (a message's header holds at most 64 MiB)


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


Built = dict[tuple[tuple[str, ...], str], tritonc.TritonBuild]  # (launch key, arch) -> what came out


def compile_launched(launches: list[tuple[str, Launch]], archs: list[str], known: Built | None = None,
                     root: str = "") -> dict[str, Any]:  # JSON, as FinishReply.compile holds it
    """Compile each launched specialization for each of ``archs`` (normalised, ``sm_90``):
    ``{"rows": [...], "errors": [...], "ptx": [...], "root": ..., "not_compiled": n}``, rows and
    errors in the order of the launches and the archs, whatever the threads' timing; ``ptx``: the
    PTX of each specialization for the lint architecture (see ``archs.lint_arch``), as text for the
    judge to read (32-bit offsets: it lints, not this process); ``root``: the repository as this
    process sees it (the PTX names source files by that path). ``known``: builds already made for
    the same launch and arch (by the worker's compiling sibling, see :mod:`.ahead`), taken as they are."""
    compilable = [(rel, launch) for rel, launch in launches if launch.fn is not None]
    configs = [(rel, launch,  # (the casts: a compilable launch has its fn)
                tritonc.launched_config(cast("JitFunction", launch.fn), launch.compile_constexprs, launch.signature,
                                        launch.options))
               for rel, launch in compilable[:MAX_COMPILED]]
    tasks = [(rel, launch, config, arch) for rel, launch, config in configs for arch in archs]
    known = known or {}

    def build(task: tuple[str, Launch, tritonc.TritonConfig, str]) -> tritonc.TritonBuild | Exception:
        _, launch, config, arch = task
        done = known.get((launch.key, arch))
        if done is not None:
            return done
        try:
            return tritonc.compile_kernel(cast("JitFunction", launch.fn), config, arch_number(arch))
        except Exception as exc:  # noqa: BLE001 - Triton raises many types for a compile error
            return exc

    threads = max(1, min(MAX_THREADS, len(tasks) - sum((t[1].key, t[3]) in known for t in tasks),
                         len(os.sched_getaffinity(0))))
    with ThreadPoolExecutor(threads) as pool:
        builds = list(pool.map(build, tasks))  # in the order of the tasks: the report does not depend on timing
    if threads > 1:  # a failure is reported only if it fails alone too: never one of compiling side by side
        builds = [build(task) if isinstance(built, Exception) else built for task, built in zip(tasks, builds)]
    rows: list[dict[str, object]] = []
    errors: list[dict[str, object]] = []
    ptx: list[dict[str, object]] = []
    read = lint_arch(archs) if archs else None
    ptx_left_out = ptx_bytes = 0
    for (rel, launch, _, arch), built in zip(tasks, builds):
        where = {"file": rel, "kernel": launch.function, "arch": arch, "constexprs": launch.constexprs,
                 "signature": launch.signature}
        if isinstance(built, Exception):
            text = str(built).strip().splitlines() or [type(built).__name__]
            errors.append({**where, "error": "\n".join(text[:ERROR_LINES])})
            continue
        if arch == read and built.ptx:
            if ptx_bytes + len(built.ptx) <= PTX_BYTES:
                ptx.append({**where, "ptx": built.ptx})
                ptx_bytes += len(built.ptx)
            else:
                ptx_left_out += 1
        for r in built.resources:
            rows.append({**where, "symbol": r.symbol, "launches": launch.count, "registers": r.registers,
                         "spill_store": r.spill_store, "spill_load": r.spill_load, "local_bytes": r.local_bytes,
                         "shared_bytes": r.shared_bytes, "constant_bytes": r.constant_bytes,
                         "barriers": r.barriers})
    return {"rows": rows, "errors": errors, "ptx": ptx, "root": root, "ptx_left_out": ptx_left_out,
            "not_compiled": max(0, len(compilable) - MAX_COMPILED)}


def build_ahead(launches: list[tuple[str, Launch]], archs: list[str], threads: int) -> list[dict[str, object]]:
    """In the compiling sibling (see :mod:`.ahead`): compile the launches its dry runs made, for
    ``archs``, as :func:`compile_launched` would, so that the worker's ``finish`` finds them built.
    Only what compiled is listed (a failure is compiled again, and reported, by the worker)."""
    compilable = [launch for _, launch in launches if launch.fn is not None][:MAX_COMPILED]
    tasks = [(launch, arch) for launch in compilable for arch in archs]
    read = lint_arch(archs) if archs else None

    def build(task: tuple[Launch, str]) -> dict[str, object] | None:
        launch, arch = task
        try:
            fn = cast("JitFunction", launch.fn)  # a compilable launch has its fn
            config = tritonc.launched_config(fn, launch.compile_constexprs, launch.signature, launch.options)
            built = tritonc.compile_kernel(fn, config, arch_number(arch))
        except Exception:  # noqa: BLE001 - the worker compiles it again and reports the error
            return None
        return {"key": list(launch.key), "arch": arch, "name": built.name,
                "resources": [r.to_json() for r in built.resources],
                "ptx": built.ptx if arch == read else ""}  # read by the judge (see compile_launched)

    with ThreadPoolExecutor(max(1, min(threads, len(tasks) or 1))) as pool:
        return [b for b in pool.map(build, tasks) if b is not None]


def builds_from_json(data: object) -> Built:
    """The sibling's builds, read back field by field; what does not read is left out (compiled
    again by the worker)."""
    from ..cuda.nvcc import KernelResources

    out: Built = {}
    fields = {f.name for f in dataclasses.fields(KernelResources)}
    for item in data if isinstance(data, list) else []:
        try:
            key = tuple(str(k) for k in item["key"])
            resources = [KernelResources(**{k: v for k, v in r.items() if k in fields}) for r in item["resources"]]
            ptx = item.get("ptx")
            out[(key, str(item["arch"]))] = tritonc.TritonBuild(str(item["name"]), ptx if isinstance(ptx, str) else "",
                                                                resources)
        except (KeyError, TypeError, ValueError):
            continue
    return out
