"""The local executor: every job in its own sandboxed subprocess, spread over the visible GPUs.

Each job gets a timeout that kills its whole sandbox, a scrubbed environment (no tokens,
nothing naming gpu-gate), one GPU (``CUDA_VISIBLE_DEVICES``) and a directory of its own that
no other job sees. A crash, hang or corrupted CUDA context ends that job only: it becomes a
finding and the other jobs go on. A fresh process per job means a GPU left in a sticky error
state by one kernel does not poison the next job."""
from __future__ import annotations

import contextlib
import dataclasses
import os
import queue
import resource
import shutil
import sys
import tempfile
import threading
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from ..store import bytecode
from . import orphans, sandbox
from .. import proc
from ..judge.checks import check_info
from ..findings import Finding, JobResult, Severity, Status
from ..protocol.jobs import Job
from .control import ProgressFn, RunControl
from .job import run_one
from .options import ExecOptions, LESS_URGENT
from .results import _error_result, _refused
from ..judge.checks.fitting import RESERVED
from .reservations import Reservations
from .slots import GpuSlots, _gpu_problem, gpu_free_bytes, gpu_total_bytes, memory_need


def order_jobs(jobs: Sequence[Job]) -> list[Job]:
    """Longest first, the jobs under a tool (compute-sanitizer) interleaved with the others so one GPU
    is not all sanitizer."""
    plain = sorted((j for j in jobs if not _under_tool(j)), key=lambda j: (-j.cost, j.id))
    tooled = sorted((j for j in jobs if _under_tool(j)), key=lambda j: (-j.cost, j.id))
    out: list[Job] = []
    while plain or tooled:
        for group in (plain, tooled):
            if group:
                out.append(group.pop(0))
    return out


def _under_tool(job: Job) -> bool:
    info = check_info(job.check)
    return info is not None and info.tool is not None


def installed_without_bytecode(package: str = "torch") -> bool:
    """Whether ``package`` (what every job imports first) is installed without compiled bytecode:
    an image built with ``pip install --no-compile``, or one whose __pycache__ was stripped. Each
    job would then compile it from source again. Found without importing it."""
    import importlib.util

    try:
        spec = importlib.util.find_spec(package)
    except (ImportError, ValueError):
        return False
    if spec is None or not spec.origin or not spec.origin.endswith(".py"):
        return False
    try:
        return not os.path.exists(importlib.util.cache_from_source(spec.origin))
    except (NotImplementedError, ValueError):
        return False


@contextlib.contextmanager
def shared_bytecode(work_root: Path | None = None, store: Path | None = None) -> Iterator[Path | None]:
    """A bytecode directory for one run's interpreters (PYTHONPYCACHEPREFIX), made only where torch
    was installed without bytecode, and removed afterwards; None where it is not needed or there is
    no room for it (each interpreter then compiles what it imports, as without it). It starts from
    ``store``, the bytecode kept from earlier runs (see gpu_gate.store.bytecode), where one is given."""
    if not installed_without_bytecode():
        yield None
        return
    try:
        pycache = Path(tempfile.mkdtemp(prefix="pyc-", dir=work_root))
    except OSError:
        yield None
        return
    try:
        import importlib.util

        torch_spec = importlib.util.find_spec("torch")
        origin = torch_spec.origin if torch_spec is not None else None
        # Filled by the gate, with no repository code: jobs see it read-only. Where a store is kept,
        # the fill goes there, so that the next run finds torch's bytecode and skips it (seconds).
        fill = pycache if store is None else store
        if not origin or not bytecode.fresh(bytecode.prefixed(fill, origin), origin):
            fill.mkdir(parents=True, exist_ok=True)
            proc.run([sys.executable, "-I", "-X", f"pycache_prefix={fill}", "-c", "import torch"],
                     cwd=pycache, env=proc.scrubbed_env(), timeout=900)
        if store is not None:
            bytecode.seed(store, pycache)
        yield pycache
    finally:
        shutil.rmtree(pycache, ignore_errors=True)


def sandbox_findings(avail: sandbox.Available, mode: sandbox.Mode) -> list[Finding]:
    """What the run says about its sandbox: nothing when one works; else ``sandbox-unavailable``,
    blocking when the policy requires one, a loud warning under ``auto``, a note when ``off``."""
    if avail.kind == "unshare":
        return [Finding(check="sandbox", kind="sandbox-weak", severity=Severity.WARNING,
                        message=f"jobs ran in an unshare sandbox, not bubblewrap ({avail.detail}): /tmp and the "
                                f"rest of the filesystem are shared with code under test, and compute-sanitizer runs "
                                f"inside its sandbox, where that code could rewrite the tool's report, and where, on "
                                f"an H100, the tool never saw the worker's CUDA calls: its jobs failed closed "
                                f"(install bubblewrap: apt-get install bubblewrap)")]
    if avail.works:
        return []
    if mode == "off":
        msg = ("jobs ran without a sandbox (runner.sandbox: off): code under test could read gpu-gate's environment, "
               "write the reports and the result cache, and signal gpu-gate")
        return [Finding(check="sandbox", kind="sandbox-unavailable", message=msg, severity=Severity.NOTE)]
    msg = f"no sandbox works on this runner ({avail.detail})"
    if mode == "required":
        return [Finding(check="sandbox", kind="sandbox-unavailable", severity=Severity.ERROR,
                        message=f"{msg}; runner.sandbox is required, so no job ran (install bubblewrap: "
                                f"apt-get install bubblewrap; run `gpu-gate doctor`)")]
    return [Finding(check="sandbox", kind="sandbox-unavailable", severity=Severity.WARNING,
                    message=f"{msg}: jobs ran UNSANDBOXED, so code under test could read gpu-gate's environment, "
                            f"write the reports and the result cache, and signal gpu-gate (install bubblewrap, or "
                            f"set runner.sandbox: required to refuse such runs)")]


OPEN_FILES = 1 << 16


def raise_open_files() -> int | None:
    """Raise the gate's soft limit on open files towards its hard limit (at most ``OPEN_FILES``);
    the judges and workers it starts inherit it. Large tensors cross as memory files whose
    descriptors are in flight between a worker and its judge (:mod:`gpu_gate.protocol.shared`), and
    the kernel bounds one user's descriptors in flight by the sender's limit: a login shell's 1024,
    shared by every job of every gate on the runner, is not what a gate should fail on. The limit
    now in force (None: unknown)."""
    try:
        soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        want = OPEN_FILES if hard == resource.RLIM_INFINITY else min(OPEN_FILES, hard)
        if soft != resource.RLIM_INFINITY and soft < want:
            resource.setrlimit(resource.RLIMIT_NOFILE, (want, hard))
            return want
        return soft
    except (ValueError, OSError):
        return None


def prime(opts: ExecOptions) -> None:
    """Work out, once and before any job starts, the machine's facts every job's start reads: gpu-gate's
    own files (hidden from the disguised replay; reading them reads every installed distribution's
    metadata), the GPUs' device nodes, the sandbox's view of the system. Each is kept for the run, but
    the jobs of the first wave all start at once: each worked them out again, in the gate's one
    process, taking turns for the interpreter's lock (on an H200, 8.8 s for each of 8 jobs; 22 s for
    each of 16 on two H200s). A fact that cannot be had now is left for the job, which says why."""
    from . import disguised, gpu_nodes, view

    with contextlib.suppress(Exception):
        disguised.gate_files()
    if opts.gpus and opts.sandbox is not None and opts.sandbox.kind == "bwrap":
        with contextlib.suppress(Exception):
            gpu_nodes.gpus()
    if view.minimal():
        with contextlib.suppress(Exception):
            view.system_binds()


def execute(jobs: Sequence[Job], opts: ExecOptions, progress: ProgressFn | None = None,
            control: RunControl | None = None) -> list[JobResult]:
    """Run every job; one worker per GPU (or ``opts.workers`` CPU workers without one)."""
    control = control or RunControl()
    raise_open_files()
    if opts.sandbox is None:
        return execute(jobs, dataclasses.replace(opts, sandbox=sandbox.choose(opts.sandbox_mode)), progress, control)
    if opts.sandbox_mode == "required" and not opts.sandbox.works:
        return [_refused(j, opts.sandbox) for j in order_jobs(jobs)]
    if not opts.sandbox.works:
        # Orphans of the jobs come to the gate instead of init, where they can be found and killed.
        orphans.become_subreaper()
    if opts.pycache is None and jobs:  # no job to run: nothing to prepare for
        with shared_bytecode(opts.work_root) as pycache:
            if pycache is not None:
                return execute(jobs, dataclasses.replace(opts, pycache=pycache), progress, control)
    prime(opts)
    ordered = order_jobs(jobs)
    per_gpu = max(1, opts.jobs_per_gpu)
    # GPU by GPU, then again: the first (longest) jobs go one to each GPU
    slots: list[str | None] = [g for _ in range(per_gpu) for g in opts.gpus] if opts.gpus else \
        [None] * max(1, opts.workers or 1)
    gpu_slots = GpuSlots(per_gpu, opts.free_memory or gpu_free_bytes,
                         Reservations(opts.gpu_memory or gpu_total_bytes, opts.reservations_dir) if opts.gpus else None)
    work: queue.Queue[Job] = queue.Queue()
    for j in ordered:
        work.put(j)
    results: dict[str, JobResult] = {}
    lock = threading.Lock()
    start = time.monotonic()
    stop = threading.Event()
    leading: dict[str | None, str] = {}  # per GPU, the job running at full CPU priority (see _niced)

    def lead(gpu: str | None, job: Job) -> ExecOptions:
        with lock:
            if gpu not in leading:
                leading[gpu] = job.id
                return opts
        return dataclasses.replace(opts, nice=LESS_URGENT)

    def led(gpu: str | None, job: Job) -> None:
        with lock:
            if leading.get(gpu) == job.id:
                del leading[gpu]

    def record(job: Job, res: JobResult) -> None:
        with lock:
            results[job.id] = res
            if progress is not None:
                progress(res, len(results), len(ordered), time.monotonic() - start)
            if opts.fail_fast and res.status in (Status.FAILED, Status.ERROR) and res.level == "required":
                stop.set()

    def worker(gpu: str | None) -> None:
        while True:
            try:
                job = work.get_nowait()
            except queue.Empty:
                return
            if control.reason is not None:
                res = dataclasses.replace(_error_result(job, "interrupted", control.reason, None),
                                          status=Status.NOT_RUN)
            elif stop.is_set() or time.monotonic() > opts.run_deadline:
                why = ("skipped after the first failure (fail_fast)" if stop.is_set()
                       else "the whole run's time limit was reached before this job started")
                res = _error_result(job, "timeout" if not stop.is_set() else "not-run", why, None)
                if stop.is_set():
                    res = dataclasses.replace(res, status=Status.NOT_RUN, findings=[])
            else:
                token = None
                if gpu is not None:
                    # the job's own time limit starts once it has its place: waiting is not its time
                    token = gpu_slots.acquire(gpu, memory_need(job))
                    if token is not None:
                        job = dataclasses.replace(job, options={**job.options, RESERVED: memory_need(job)})
                began = time.monotonic() - start
                try:
                    res = run_one(job, lead(gpu, job), gpu, control)
                    outside = (res.extra.timing or {}).get("outside")
                    if isinstance(outside, dict):
                        outside["began_s"] = round(began, 2)  # after the run's start (a GPU slot's wait)
                except Exception as exc:  # noqa: BLE001 - one job's failure never stops the run
                    res = _error_result(job, "internal-error", f"internal error running the job: {exc}", None)
                finally:
                    led(gpu, job)
                    if gpu is not None:
                        gpu_slots.release(gpu, token)
            problem = _gpu_problem(opts, gpu) if res.status is Status.ERROR and control.reason is None else None
            if problem:
                # The GPU itself is gone or broken: this worker stops; jobs go to the healthy GPUs.
                res.findings.append(Finding(check=job.check, kind="infrastructure", severity=Severity.ERROR,
                                            spec=job.spec.id if job.spec else None,
                                            message=f"GPU {gpu} is unusable after this job: {problem}"))
                record(job, res)
                return
            record(job, res)

    threads = [threading.Thread(target=worker, args=(g,), daemon=True) for g in slots]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    while True:  # every worker's GPU was lost: what is left cannot run here
        try:
            job = work.get_nowait()
        except queue.Empty:
            break
        record(job, _error_result(job, "infrastructure", "no healthy GPU left on this runner to run the job", None))
    return [results[j.id] for j in ordered if j.id in results]
