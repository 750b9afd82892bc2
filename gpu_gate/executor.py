"""The local executor: every job in its own sandboxed subprocess, spread over the visible GPUs.

Each job gets a timeout that kills its whole sandbox, a scrubbed environment (no tokens,
nothing naming gpu-gate), one GPU (``CUDA_VISIBLE_DEVICES``) and a directory of its own that
no other job sees. A crash, hang or corrupted CUDA context ends that job only: it becomes a
finding and the other jobs go on. A fresh process per job means a GPU left in a sticky error
state by one kernel does not poison the next job.

The sandbox (:mod:`gpu_gate.sandbox`) keeps the report directory, the result cache and
gpu-gate's installation out of the job's reach and ends every process the job started. The
worker still runs the comparison in its own process, so a candidate can forge *its own* job's
result; it cannot write another job's result, a report or a cache entry.

A :class:`RunControl` lets the caller stop the run (SIGTERM, SIGINT): every running sandbox
is killed, and the jobs it held, and those not yet started, come back as interrupted.
"""
from __future__ import annotations

import contextlib
import dataclasses
import functools
import json
import os
import queue
import shutil
import signal
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any, NamedTuple

from . import bytecode, compiled_store, gpu_nodes, proc, sandbox
from .checks import CHECKS, SANITIZER_TOOLS
from .checks.outcome import WrapContext
from .findings import Finding, JobResult, Severity, Status
from .jobs import Job
from .rules.judging import base_commit


@dataclasses.dataclass(frozen=True)
class ExecOptions:
    repo_root: Path
    gpus: tuple[str, ...]  # visible GPU indices; empty: no GPU
    timeout_s: float = 1800.0
    run_deadline: float = float("inf")  # time.monotonic() after which no new job starts
    workers: int | None = None  # CPU-only: how many jobs at once
    fail_fast: bool = False
    sanitizer_path: str | None = None
    keep_workdirs: Path | None = None  # copy each job's directory here (sanitizer XML, logs)
    health_probe: Callable[[str], str | None] | None = None  # GPU index -> problem, None if healthy
    jobs_per_gpu: int = 1  # jobs sharing one GPU at once
    free_memory: Callable[[str], int | None] | None = None  # GPU index -> free bytes (default: nvidia-smi)
    work_root: Path | None = None  # where job directories are made (default: the system temp dir)
    pycache: Path | None = None  # bytecode shared by this run's jobs (made by ``execute``)
    sandbox_mode: sandbox.Mode = "auto"  # the policy's runner.sandbox
    sandbox: sandbox.Available | None = None  # the sandbox in use (default: chosen from sandbox_mode)
    hide: tuple[Path, ...] = ()  # directories no job may see or write: the report directory, the result cache
    base_root: Path | None = None  # the base's work tree, for jobs that also run the base's code (differential)
    # Triton kernels the base's code compiled in earlier runs (see compiled_store): in the result cache
    kernel_store: Path | None = None
    # The interpreter the workers run with (never the judge): the venv that the sandboxed `setup` installed
    # the repository into (gpu_gate.github.setup_sandbox). None: this interpreter
    worker_python: Path | None = None
    # CPU priority of the job's processes (``nice``): 0 for each GPU's lead job, the one that started
    # while none of its others ran (the longest, by ``order_jobs``); LESS_URGENT for the jobs beside it
    nice: int = 0


class RunControl:
    """Stops a run from outside (a signal handler): kills every running job's process group
    (a sandbox dies with its outer process) and makes the jobs report as interrupted."""

    def __init__(self) -> None:
        self.reason: str | None = None
        self._running: set[int] = set()
        self._lock = threading.Lock()

    def cancel(self, reason: str) -> None:
        with self._lock:
            if self.reason is None:
                self.reason = reason
            running = list(self._running)
        for pid in running:
            _kill_group(pid)

    def started(self, pid: int) -> None:
        with self._lock:
            self._running.add(pid)
            cancelled = self.reason is not None
        if cancelled:  # the signal came between the start and this call
            _kill_group(pid)

    def ended(self, pid: int | None) -> None:
        with self._lock:
            self._running.discard(pid or -1)


@contextlib.contextmanager
def cancel_on_signals(control: RunControl) -> Iterator[None]:
    """While inside, SIGTERM and SIGINT cancel the run instead of killing gpu-gate: every job's
    sandbox is killed, the run ends, and the caller writes the reports with what finished."""
    import signal

    def handler(signum: int, _frame: Any) -> None:
        control.cancel(f"interrupted by {signal.Signals(signum).name}")

    if threading.current_thread() is not threading.main_thread():
        yield  # signal handlers can only be set from the main thread
        return
    old = {s: signal.signal(s, handler) for s in (signal.SIGTERM, signal.SIGINT)}
    try:
        yield
    finally:
        for s, h in old.items():
            signal.signal(s, h)


def interrupted_finding(reason: str) -> Finding:
    return Finding(check="gate", kind="interrupted", severity=Severity.ERROR,
                   message=f"the run was {reason}: every running job was killed, and the reports show what finished")


def _kill_group(pid: int) -> None:
    import signal

    try:
        os.killpg(pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


ProgressFn = Callable[[JobResult, int, int, float], None]


def detect_gpus() -> tuple[str, ...]:
    """Visible GPU indices, without importing torch."""
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if visible is not None:
        return tuple(v.strip() for v in visible.split(",") if v.strip() and v.strip() != "-1")
    return tuple(g["index"] for g in gpu_inventory() if g["index"].isdigit())


@functools.lru_cache(maxsize=1)
def gpu_inventory() -> tuple[dict[str, str], ...]:
    """Every GPU nvidia-smi lists: index, name and driver version; one query per process (it is
    slow where the driver is not kept loaded), empty without nvidia-smi."""
    if shutil.which("nvidia-smi") is None:
        return ()
    r = proc.run(["nvidia-smi", "--query-gpu=index,name,driver_version", "--format=csv,noheader"], timeout=20)
    if not r.ok:
        return ()
    rows = [[c.strip() for c in line.split(",")] for line in r.stdout.splitlines() if line.strip()]
    return tuple({"index": row[0], "name": ", ".join(row[1:-1]), "driver": row[-1]} for row in rows if len(row) >= 3)


def _classify_failure(job: Job, pr: proc.ProcResult, timeout_s: float) -> tuple[str, str]:
    if pr.not_found:
        return "internal-error", f"could not start the job process: {pr.stderr.strip()}"
    if pr.timed_out:
        return "timeout", (f"the job did not finish within {timeout_s:.0f}s and was killed with its whole process "
                           f"group (a hang, a deadlock in the kernel, or too slow)")
    if pr.signal == 9:
        return "crash", (f"the job process died: {pr.describe()} (SIGKILL from outside the job: most often the "
                         f"kernel's out-of-memory killer, i.e. the runner ran out of host memory)")
    if pr.signal:
        return "crash", f"the job process died: {pr.describe()}"
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
                     duration_s=duration, cases=outcome.cases, reason=outcome.reason, extra=dict(outcome.extra),
                     log_tail=log_tail)


def run_one(job: Job, opts: ExecOptions, gpu: str | None, control: RunControl | None = None) -> JobResult:
    info = CHECKS[job.check]
    if info.needs_gpu and gpu is None:
        return JobResult(job_id=job.id, check=job.check, status=Status.NOT_RUN, level=job.level,
                         spec=job.spec.id if job.spec else None, kernels=job.kernels,
                         reason=f"no GPU on this machine: {job.check} needs a CUDA device")
    control = control or RunControl()
    stuck: list[str] = []
    while True:
        result = _run_one(job, opts, gpu, control)
        found = next((f for f in result.findings if f.kind == STUCK), None)
        if found is None or control.reason is not None or len(stuck) + 1 >= STUCK_ATTEMPTS:
            break
        # the hang seen on an H100 came now and then, not every time (twice in a row, once): again
        stuck.append(found.message)
    if not stuck:
        return result
    times = "; ".join(f"{_ORDINAL[i]}, {m}" for i, m in enumerate(stuck))
    note = Finding(check=job.check, kind="retried", severity=Severity.NOTE, spec=job.spec.id if job.spec else None,
                   message=f"run {len(stuck) + 1} times: {times}")
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
            dest = opts.keep_workdirs / job.id.replace("/", "_").replace(":", "_")
            shutil.copytree(workdir, dest, dirs_exist_ok=True, ignore=shutil.ignore_patterns("*.tmp"))
            for report in outer.glob("*.xml"):  # compute-sanitizer's, written beside the worker's directory
                shutil.copy2(report, dest / report.name)
        shutil.rmtree(outer, ignore_errors=True)


# Variables that would tell a job it runs under gpu-gate (the action's inputs, gpu-gate's own
# settings); the job learns what it needs from its job file.
_GATE_ENV_PREFIXES = ("GPU_GATE_", "INPUT_")


def job_gpu(gpu: str | None, avail: sandbox.Available) -> gpu_nodes.JobGpu | None:
    """The device nodes and the CUDA name of a job's GPU, where its sandbox builds its own ``/dev``
    (bwrap); None where the job has no GPU, or sees the machine's ``/dev`` (unshare, no sandbox)."""
    if gpu is None or avail.kind != "bwrap":
        return None
    return gpu_nodes.for_job(gpu)


def _env_for(opts: ExecOptions, gpu: str | None, workdir: Path, threads: int, check: str,
             avail: sandbox.Available) -> dict[str, str]:
    sandboxed = avail.works
    own = job_gpu(gpu, avail)
    extra = {
        # by UUID where the sandbox holds the one GPU's node: CUDA numbers it 0 in there
        "CUDA_VISIBLE_DEVICES": own.cuda_name if own is not None else gpu if gpu is not None else "",
        "TMPDIR": str(workdir),
        "OMP_NUM_THREADS": str(threads),
    }
    if sandboxed:
        # The home directory is read-only in the sandbox: the JIT caches go to the job's own
        # directory (private to the job, gone with it, and deciding nothing).
        cache = workdir / ".cache"
        extra.update({"XDG_CACHE_HOME": str(cache), "TRITON_CACHE_DIR": str(cache / "triton"),
                      "CUPY_CACHE_DIR": str(cache / "cupy"), "CUDA_CACHE_PATH": str(cache / "nv")})
    if gpu is not None and "CUDA_DEVICE_ORDER" not in os.environ:
        # CUDA's own default numbers GPUs fastest first; nvidia-smi, NVML (the doctor) and people
        # number them by PCI bus. With this, "GPU 2" is the same GPU for all of them.
        extra["CUDA_DEVICE_ORDER"] = "PCI_BUS_ID"
    if gpu is None and check != "compile":  # the compile check needs Triton's real compiler
        extra["TRITON_INTERPRET"] = "1"  # Triton kernels run on the CPU through the interpreter
    env = proc.scrubbed_env(extra=extra)
    for name in list(env):
        if name.startswith(_GATE_ENV_PREFIXES):
            del env[name]
    if check == "compile":
        env.pop("TRITON_INTERPRET", None)
    return env


def judge_argv(opts: ExecOptions, job_file: Path, result_file: Path) -> list[str]:
    """The judge's command line: gpu-gate's own harness, outside the sandbox."""
    return [sys.executable, "-I", *_flags(opts), "-c", _BOOT, str(job_file), str(result_file)]


def _flags(opts: ExecOptions) -> list[str]:
    flags = ["-u"]
    if opts.pycache is not None:
        flags += ["-X", f"pycache_prefix={opts.pycache}"]
    else:
        flags.append("-B")
    return flags


def worker_argv(opts: ExecOptions, job_file: Path, result_file: Path | None, *, role: str | None = None,
                fd: int | None = None) -> list[str]:
    """The worker's command line (``role``: a judged job's candidate or reference worker, on socket
    ``fd``; else a job that writes its own result, the compile check). ``-I`` (isolated): no PYTHON* variables, no user site, and
    neither the working directory nor the script's directory on sys.path, so a repository file
    ``gpu_gate/harness.py`` (or ``torch.py``) cannot stand in for the installed one; the harness
    puts the repository on sys.path itself, behind the standard library (see harness.user_path)."""
    flags = ["-u"]
    if opts.pycache is not None:
        # Every job is a fresh interpreter that imports torch. Where torch was installed without
        # bytecode (see installed_without_bytecode), each job would recompile it from source: about
        # 5 s per job on an H100 runner. The run's jobs read one bytecode directory instead, made
        # for this run by the gate and read-only in the sandbox (a job cannot plant bytecode for
        # another job), which also keeps __pycache__ folders out of the repository.
        flags += ["-X", f"pycache_prefix={opts.pycache}"]
    else:
        flags.append("-B")
    # The reference computes the truth: it runs with gpu-gate's own interpreter, which the setup
    # commands could not write, never with their venv (a .pth file planted there runs at start-up).
    # It imports the spec with the repository's modules stubbed, so it needs nothing setup installed.
    trusted = role == "reference"
    python = str(opts.worker_python) if opts.worker_python is not None and not trusted else sys.executable
    if role is not None:
        return [python, "-I", *flags, "-c", _WORKER_BOOT, str(job_file), str(fd), role]
    return [python, "-I", *flags, "-c", _BOOT, str(job_file), str(result_file)]


# Where gpu-gate is not installed in site-packages (run from a source tree through PYTHONPATH,
# which -I ignores), its own directory is added at the end of sys.path: never ahead of anything.
_BOOT = ("import sys, importlib.util\n"
         f"if importlib.util.find_spec('gpu_gate') is None: sys.path.append({str(sandbox.gate_package_dir().parent)!r})\n"
         "from gpu_gate.harness import main\n"
         "sys.exit(main())")
_WORKER_BOOT = _BOOT.replace("from gpu_gate.harness import main", "from gpu_gate.worker.serve import main")


def _layout(opts: ExecOptions, gpu: str | None, workdir: Path, avail: sandbox.Available,
            source: Path | None = None, lent: tuple[tuple[Path, Path], ...] = ()) -> sandbox.Layout:
    """What the job's sandbox shows: the repository and Python's installation read-only; the
    report directory, the cache and every job directory of the run (this job's parent included)
    empty; this job's directory writable."""
    hide = [*opts.hide, workdir.parent]
    work_root = Path(opts.work_root or tempfile.gettempdir()).resolve()
    if not (avail.kind == "bwrap" and work_root == Path("/tmp")):  # bwrap's /tmp is private already
        hide.append(work_root)
    keep = [*sandbox.python_install_paths()]
    if opts.sanitizer_path:
        keep.append(Path(opts.sanitizer_path).parent)
    # A path shown again must not bring a hidden one back into view (a sys.path entry of /tmp).
    covered = [Path(os.path.realpath(p)) for p in (*hide, Path("/tmp"))]
    keep = [k for k in keep if not any(h == Path(os.path.realpath(k)) or Path(os.path.realpath(k)) in h.parents
                                       for h in covered)]
    # gpu-gate's own package, by itself: its source tree may be a directory that had to go because a
    # hidden one lies inside it (the demo's reports under a source checkout).
    own = sandbox.gate_package_dir()
    if not any(h == own or h in own.parents for h in covered[:-1]):
        keep.append(own)
    if opts.worker_python is not None:  # the workers' venv, read-only, unless it holds a hidden directory
        venv = Path(os.path.realpath(Path(opts.worker_python).parent.parent))
        if not any(h == venv or venv in h.parents for h in covered[:-1]):
            keep.append(venv)
    if opts.pycache is not None:
        keep.append(opts.pycache)
    return sandbox.Layout(repo=opts.repo_root, jobdir=workdir, hide=tuple(hide), readonly=tuple(keep),
                          devices=_devices(gpu, avail), source=source,
                          lent=tuple((Path(os.path.realpath(a)), Path(os.path.realpath(b))) for a, b in lent))


def _devices(gpu: str | None, avail: sandbox.Available) -> tuple[str, ...]:
    """The NVIDIA device nodes a job's bwrap sandbox binds: none without a GPU; the shared ones and
    the job's own GPU's (every GPU's where that one cannot be told apart: see gpu_nodes)."""
    own = job_gpu(gpu, avail)
    if own is not None:
        return own.nodes
    return tuple(gpu_nodes.node_names()) if gpu is not None else ()


def _context(opts: ExecOptions, gpu: str | None, job: Job) -> dict[str, Any]:
    """What the harness needs to know, handed over in its job file rather than in variables
    that a kernel could read to tell it is being tested."""
    return {"repo_root": str(opts.repo_root), "budget_s": max(1.0, opts.timeout_s * 0.8),
            "device": None if gpu is not None else "cpu",
            "sanitizer": job.check if job.check in SANITIZER_TOOLS else None}


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
        from .checks.compiled_base import against_base

        left = max(1.0, min(opts.timeout_s, opts.run_deadline - time.monotonic()))  # within the run's deadline
        result = against_base(job, result, _compile_at_base(job, opts, gpu, workdir, control, avail, left), commit)
    return result


def _compile_at_base(job: Job, opts: ExecOptions, gpu: str | None, workdir: Path, control: RunControl,
                     avail: sandbox.Available, timeout: float) -> JobResult | None:
    """The same compile job on the base's tree (a pull request), in a sandbox of its own, so that
    the findings read from the head's compiled code can be told new from pre-existing. None where
    it produced no result, or left processes behind (then nothing it wrote is read)."""
    from .cuda.archs import DEFAULT_ARCHS, lint_arch, normalise_archs

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


def _contained_run(argv: list[str], opts: ExecOptions, gpu: str | None, workdir: Path, env: dict[str, str],
                   timeout: float, avail: sandbox.Available, control: RunControl, extra_fds: tuple[int, ...] = (),
                   on_start: Callable[[int], None] | None = None, source: Path | None = None,
                   lent: tuple[tuple[Path, Path], ...] = (),
                   tool: Sequence[str] = ()) -> Contained:
    """Run ``argv`` in the sandbox; also return how many processes outlived the worker (they
    are dead by the time this returns), whether a process of the job killed the sandbox's
    waiter, which counts them (possible only where a tool watches from outside: the waiter is then
    not PID 1; the sandbox dies with it, so what it would have counted is dead too), how many
    of the sandbox's own processes the gate had to end, and whether the sandbox never started
    the worker (both only under a tool outside: see :class:`_ToolWatch`).
    ``extra_fds``: descriptors the process inherits (its end of the socket to the judge);
    ``source``: the tree shown at the repository's path (the base's); ``lent``: (a directory of the
    gate's, where the sandbox shows it read-only: the kept kernels); ``tool``: compute-sanitizer's
    command line, run with the sandbox as its program (outside a bwrap sandbox; inside an unshare
    one, before the worker). The result's exit code is then the tool's, else the worker's."""
    with tempfile.TemporaryFile() as count:
        layout = _layout(opts, gpu, workdir, avail, source, lent)
        full = _niced(sandbox.wrap(avail, layout, argv, count.fileno(), tool), opts)
        start = sandbox.boot_ticks()
        pid: list[int] = []

        def started(p: int) -> None:
            pid.append(p)
            control.started(p)
            if on_start is not None:
                on_start(p)

        watch = None
        if tool and avail.works and avail.tool_outside and avail.path is not None:
            # The sandbox's leftovers come to the gate, not to init, where the sweep below finds them.
            sandbox.become_subreaper()
            watch = _ToolWatch(count.fileno(), avail.path)
        try:
            pr = proc.run(full, cwd=opts.repo_root, env=env, timeout=timeout,
                          on_start=watch.wrap(started) if watch is not None else started,
                          pass_fds=((count.fileno(),) if avail.works else ()) + extra_fds)
        finally:
            control.ended(pid[0] if pid else None)
            ended = watch.finish(start) if watch is not None else 0
        if avail.works:
            count.seek(0)
            text = count.read().decode(errors="replace")
            status, n = sandbox.read_waiter(text)
            if status is not None and pr.returncode is not None and not tool:
                pr = dataclasses.replace(pr, returncode=status)  # the worker's, not the wrapper's
            # Under a tool outside, the waiter is not PID 1: started, never finished, and the gate did
            # not kill it, a process inside did.
            unwatched = (bool(tool) and avail.tool_outside and status is None and sandbox.waiter_started(text)
                         and not pr.timed_out and control.reason is None)
            return Contained(pr, n, unwatched, ended, watch is not None and watch.stuck,
                             watch.started_s if watch is not None else None)
        return Contained(pr, _hunt_orphans(start), False, 0)


class Contained(NamedTuple):
    """What :func:`_contained_run` saw: the run, the processes that outlived the worker, whether the
    waiter was killed from inside, the sandbox processes the gate ended after the worker, and
    whether a sandbox watched by a tool never started its worker (:class:`_ToolWatch`)."""

    pr: proc.ProcResult
    escaped: int
    unwatched: bool
    ended: int
    stuck: bool = False
    started_s: float | None = None  # under a tool outside: how long the sandbox took to start its worker


# How long a sandbox watched by a tool may stay after its worker has ended before the gate ends it.
TOOL_EXIT_GRACE_S = 20.0
# How long it may take to start its worker (the waiter's first word: the tool's own start and
# bwrap's; compute-sanitizer's --launch-timeout, for the worker's first CUDA call, is 60 s). On an
# H100 with the demo's 14 jobs running, the sandboxes that started did so in 0.2-0.4 s, and 13 of 19
# runs had one that never did: a hang, not a slow start. A run that passes the limit is tried
# again, up to STUCK_ATTEMPTS runs in all: a short limit and more runs cost less and fail less
# often than a long one (three runs of 30 s failed 2 of 8 jobs there).
TOOL_START_LIMIT_S = 10.0
STUCK_ATTEMPTS = 6


class _ToolWatch:
    """Under a tool outside a bwrap sandbox: once the waiter has written the worker's end, nothing
    is left for the sandbox to run. If its processes are still there after
    :data:`TOOL_EXIT_GRACE_S`, the gate kills them (:func:`sandbox.end_watched_sandbox`), so that
    the tool sees its program end and writes its report; if the tool is still there after as long
    again, its whole process group. A sandbox that has not started its worker
    :data:`TOOL_START_LIMIT_S` after it began is ended the same way, and the run is ``stuck``.

    Measured on an H100: bwrap's init, cloned from a bwrap that the tool had injected (its
    libraries loaded, a second thread running), now and then spun at full CPU from its first
    instant, before it started the waiter. The tool said "No attachable process found ... Awaiting
    target completion" and waited for ever; so did the judge (the init held the worker's end of
    their socket) and the gate, until the job's time limit, and the init outlived them all. When
    the run ends, what the sandbox left re-parented to the gate is killed too (:meth:`finish`)."""

    def __init__(self, fd: int, bwrap: str) -> None:
        self.fd, self.bwrap = fd, bwrap
        self.root: int | None = None
        self.ended = 0
        self.stuck = False
        self.started_s: float | None = None
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)

    def wrap(self, started: Callable[[int], None]) -> Callable[[int], None]:
        def on_start(pid: int) -> None:
            started(pid)
            self.root = pid
            self.thread.start()
        return on_start

    def _said(self) -> str:
        try:
            return os.pread(self.fd, 4096, 0).decode(errors="replace")
        except OSError:
            return ""

    def _run(self) -> None:
        began = time.monotonic()
        while not sandbox.waiter_started(self._said()):
            if time.monotonic() - began > TOOL_START_LIMIT_S:
                self.stuck = True
                break
            if self.stop.wait(0.2):
                return
        if not self.stuck:
            self.started_s = round(time.monotonic() - began, 2)
            while sandbox.read_waiter(self._said())[0] is None:
                if self.stop.wait(0.2):
                    return
            if self.stop.wait(TOOL_EXIT_GRACE_S):
                return
        if self.root is None:
            return
        self.ended = sandbox.end_watched_sandbox(self.root, self.bwrap)
        if self.stop.wait(TOOL_EXIT_GRACE_S):
            return
        try:
            os.killpg(self.root, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass

    def finish(self, start: int) -> int:
        """Stop watching; kill what the sandbox left re-parented to the gate; return how many of its
        processes the gate ended."""
        self.stop.set()
        if self.thread.is_alive():
            self.thread.join()
        return self.ended + _hunt_orphans(start)


LESS_URGENT = 10  # the nice value of the jobs that run beside a GPU's lead job


def _niced(argv: list[str], opts: ExecOptions) -> list[str]:
    """``argv`` at the job's CPU priority: a job beside the GPU's lead job yields the cores to it, so
    that the job that ends last, and decides the gate's wall time, is not slowed by jobs that end
    before it anyway (they take the cores it leaves idle, while it waits on the GPU or a worker)."""
    if opts.nice <= 0:
        return argv
    nice = shutil.which("nice")
    return [nice, "-n", str(opts.nice), *argv] if nice else argv


WORKER_ROLES = ("candidate", "reference")  # and "base", the base's code, in a differential run
KEPT = ".kept"  # in a worker's directory: where its sandbox shows the spec's kept kernels, read-only
WORKER_GRACE_S = 5.0  # after the judge is done, how long a worker may take to exit before it is killed


def _run_judged(job: Job, opts: ExecOptions, gpu: str | None, workdir: Path, control: RunControl,
                avail: sandbox.Available) -> JobResult:
    """A job that runs code under review: the judge (gpu-gate's own process, outside the sandbox,
    which never imports that code) and two sandboxed workers, each in a directory of its own,
    talking over socket pairs. The result file is the judge's, in a directory no worker sees; a
    worker's exit code and files decide nothing (compute-sanitizer's report aside, read from the
    candidate worker's directory by the sanitizer check)."""
    import socket

    marks = {"enter": time.monotonic()}  # the job's time outside the judge's process, for its timing
    outer = workdir.parent
    judge_dir = outer / "judge"
    dirs = {"candidate": workdir, "reference": outer / "r"}
    # Differential runs: the base's code in a worker of its own, on the base's work tree.
    roots = {"candidate": opts.repo_root, "reference": opts.repo_root}
    if base_commit(job) and opts.base_root is not None:
        dirs["base"], roots["base"] = outer / "b", opts.base_root
    # In a sandbox the base's tree is shown at the repository's own path: its code compiles to the
    # very kernels the head's unchanged code does, and its reports name the same files.
    remap = avail.protects_files
    roles = tuple(dirs)
    shelf = compiled_store.shelf(opts.kernel_store, job) if opts.kernel_store is not None and remap else None
    try:
        judge_dir.mkdir()
        for role, d in dirs.items():
            d.mkdir(exist_ok=True)
            shown = opts.repo_root if remap else roots[role]
            context_json = _worker_context(opts, gpu, shown)
            if shelf is not None and shelf.is_dir() and role != "reference":
                # the worker copies its spec's kept kernels into its own cache itself, while it
                # imports torch and the spec, from a read-only mount of the shelf in its own
                # directory: the shelf cannot be written from there, and the base's worker, whose
                # repository path shows the base's tree, sees it too (the reference's torch code
                # launches none of them)
                (d / KEPT).mkdir()
                context_json["shelf"] = str(d / KEPT)
            (d / "context.json").write_text(json.dumps(context_json))
    except OSError as exc:
        return _error_result(job, "infrastructure", f"cannot write the job's files ({exc}): no disk space left?", None)
    marks["files"] = time.monotonic()
    pairs = {role: socket.socketpair() for role in roles}
    context = {**_context(opts, gpu, job), "channels": {role: a.fileno() for role, (a, _) in pairs.items()}}
    job_file, result_file = judge_dir / "in.json", judge_dir / "out.json"
    job_file.write_text(json.dumps({"job": job.to_json(), "context": context}))
    threads = max(1, (os.cpu_count() or 2) // concurrency(opts))
    env = _env_for(opts, gpu, workdir, threads, job.check, avail)
    judge_env = {**env, "TMPDIR": str(judge_dir)}
    module = CHECKS[job.check].load()
    argvs = {role: worker_argv(opts, dirs[role] / "context.json", None, role=role, fd=b.fileno())
             for role, (_, b) in pairs.items()}
    wrap = getattr(module, "wrap", None)
    # compute-sanitizer runs the candidate's worker's sandbox as its program (from outside a bwrap
    # sandbox); in a differential run the base's too, so that each report can be told new from
    # pre-existing.
    tools: dict[str, list[str]] = {}
    for role in ("candidate", "base"):
        if wrap is None or role not in dirs:
            continue
        wctx = WrapContext(opts.repo_root if remap else roots[role], gpu is not None, opts.sanitizer_path,
                           opts.timeout_s, env, avail.tool_outside)
        wrapped = wrap(job, dirs[role], wctx)
        if not isinstance(wrapped, list):  # an Outcome: the tool cannot run
            if role != "candidate":
                continue  # the base's reports cannot be compared: the head's are judged as they are
            _close_pairs(pairs)
            return _outcome_to_result(job, wrapped, 0.0, None)  # fail closed
        tools[role] = wrapped
    timeout = max(1.0, min(opts.timeout_s, opts.run_deadline - time.monotonic()))
    done: dict[str, Contained] = {}
    pids: dict[str, int] = {}

    def worker(role: str) -> None:
        # Each worker's caches (Triton's, CuPy's, the driver's) and temporary files in its own
        # directory: the only one its sandbox can write. The candidate's may carry the sanitizer's.
        wenv = env if role == "candidate" else _env_for(opts, gpu, dirs[role], threads, job.check, avail)
        b = pairs[role][1]
        # The judge keeps the time: a worker outlives it only until it is killed after the judge.
        def started(p: int) -> None:
            pids[role] = p

        other = roots[role] != opts.repo_root
        wopts = opts if remap or not other else dataclasses.replace(opts, repo_root=roots[role])
        lent = ((shelf, dirs[role] / KEPT),) if shelf is not None and (dirs[role] / KEPT).is_dir() else ()
        done[role] = _contained_run(argvs[role], wopts, gpu, dirs[role], wenv, timeout + 60, avail, control,
                                    extra_fds=(b.fileno(),), on_start=started,
                                    source=roots[role] if remap and other else None, lent=lent,
                                    tool=tools.get(role, ()))

    running = [threading.Thread(target=worker, args=(role,), daemon=True) for role in roles]
    for t in running:
        t.start()
    judge_pid: list[int] = []

    def judge_started(p: int) -> None:
        marks["judge"] = time.monotonic()
        judge_pid.append(p)
        control.started(p)
        for _, b in pairs.values():  # the workers hold their ends; the gate keeps none
            _wait_started(pids, len(roles))
            b.close()

    try:
        jpr = proc.run(_niced(judge_argv(opts, job_file, result_file), opts), cwd=judge_dir, env=judge_env,
                       timeout=timeout,
                       pass_fds=tuple(a.fileno() for a, _ in pairs.values()), on_start=judge_started)
    finally:
        marks["judged"] = time.monotonic()
        control.ended(judge_pid[0] if judge_pid else None)
        _close_pairs(pairs)
        for t in running:
            t.join(WORKER_GRACE_S)
        for p in pids.values():
            _kill_group(p)
        for t in running:
            t.join()
        marks["workers_gone"] = time.monotonic()
    if shelf is not None and "base" in dirs and control.reason is None:
        # every sandbox is gone: what the base's code compiled is kept for the next runs
        compiled_store.harvest(dirs["base"] / ".cache" / "triton", shelf)
    marks["kept"] = time.monotonic()
    if control.reason is not None and (jpr.signal == 9 or jpr.timed_out or jpr.returncode is None):
        return _interrupted(job, control.reason, jpr)
    stuck = sorted(role for role, c in done.items() if c.stuck)
    if stuck:
        return _stuck_result(job, stuck, done[stuck[0]].pr)
    cand_pr = done["candidate"][0] if "candidate" in done else jpr
    escaped = sum(c.escaped for c in done.values())
    unwatched = any(c.unwatched for c in done.values())
    ended = {role: c.ended for role, c in done.items() if c.ended}
    inner = _read_result(result_file)
    base_run = None
    if "base" in tools and "base" in done:
        from .checks.sanitizer import BaseRun

        base_run = BaseRun(dirs["base"], done["base"][0], roots["base"])
    result = _judge_result(job, opts, workdir, jpr, cand_pr, inner, timeout, module, base_run)
    _time_outside(result, marks, {role: c.started_s for role, c in done.items() if c.started_s is not None})
    if ended:
        result = _with_sandbox_ended(result, ended)
    return _with_escapes(result, escaped, avail, unwatched) if escaped or unwatched else result


def _time_outside(result: JobResult, marks: dict[str, float], sandbox_start: dict[str, float]) -> None:
    """Where a judged job's time went outside the judge's process (``extra.timing.outside``):
    its files, sandboxes and processes started (``start_s``, of which writing the job's files,
    ``files_s``), the workers' exit after the judge's
    (``workers_exit_s``), the base's compiled kernels kept (``keep_s``); under a tool outside the
    sandbox, how long each sandbox took to start its worker (``sandbox_start_s``, by role: what
    :data:`TOOL_START_LIMIT_S` is measured against)."""
    if "judge" not in marks or not isinstance(result.extra, dict):
        return
    timing = result.extra.setdefault("timing", {})
    if isinstance(timing, dict):
        timing["outside"] = {"files_s": round(marks["files"] - marks["enter"], 2),
                             "start_s": round(marks["judge"] - marks["enter"], 2),
                             "workers_exit_s": round(marks["workers_gone"] - marks["judged"], 2),
                             "keep_s": round(marks["kept"] - marks["workers_gone"], 2)}
        if sandbox_start:
            timing["outside"]["sandbox_start_s"] = sandbox_start


def _wait_started(pids: dict[str, int], n: int, limit_s: float = 30.0) -> None:
    end = time.monotonic() + limit_s
    while len(pids) < n and time.monotonic() < end:
        time.sleep(0.005)


def _close_pairs(pairs: dict[str, Any]) -> None:
    for a, b in pairs.values():
        for s in (a, b):
            try:
                s.close()
            except OSError:
                pass


def _worker_context(opts: ExecOptions, gpu: str | None, root: Path | None = None) -> dict[str, Any]:
    return {"repo_root": str(root or opts.repo_root), "device": None if gpu is not None else "cpu"}


def _judge_result(job: Job, opts: ExecOptions, workdir: Path, jpr: proc.ProcResult, cand: proc.ProcResult,
                  inner: JobResult | None, timeout: float, module: Any, base: Any = None) -> JobResult:
    """The judge's result; a sanitizer check adds what compute-sanitizer saw in the candidate's
    worker (and, in a differential run, in the base's). The candidate's own output (its prints, its
    traceback) is the log shown."""
    collect = getattr(module, "collect", None)
    if collect is not None:
        from .harness import Outcome

        inner_outcome = None
        if inner is not None:
            inner_outcome = Outcome(inner.status, inner.findings, inner.cases, inner.reason, inner.extra)
        outcome = collect(job, workdir, cand, inner_outcome, base) if base is not None else \
            collect(job, workdir, cand, inner_outcome)
        return _outcome_to_result(job, outcome, jpr.duration_s, cand.tail(40) or jpr.tail(40) or None)
    if inner is None:
        kind, message = _classify_failure(job, jpr, timeout)
        if jpr.timed_out and timeout < opts.timeout_s:
            message += " (the whole run's time limit cut this job short)"
        res = _error_result(job, kind, message, jpr)
        return dataclasses.replace(res, log_tail=cand.tail(40) or res.log_tail)
    inner.duration_s = jpr.duration_s
    if cand.signal or cand.returncode not in (0, None):  # how the candidate died is the executor's to say
        _, how = _classify_failure(job, cand, timeout)
        how = how.replace("the job process died: ", "") if cand.signal else f"it exited with code {cand.returncode}"
        inner.findings = [dataclasses.replace(f, message=f"{f.message}; {how}") if f.kind == "crash" else f
                          for f in inner.findings]
    if cand.tail(5) or jpr.tail(5):
        inner.log_tail = "\n".join(t for t in (cand.tail(40), jpr.tail(10)) if t)
    return dataclasses.replace(inner, job_id=job.id, check=job.check, level=job.level,
                               spec=job.spec.id if job.spec else None, kernels=job.kernels)


def _hunt_orphans(start: int) -> int:
    """Without a sandbox: kill what the job left running outside its process group (a ``setsid``
    daemon, re-parented to the gate, which is the subreaper; see ``execute``)."""
    total = 0
    for _ in range(20):  # a killed daemon's own children are adopted next
        time.sleep(0.05)
        found = sandbox.adopted_since(start)
        if not found:
            break
        total += len(found)
        sandbox.kill_and_reap(found)
    return total


STUCK = "sandbox-stuck"


def _stuck_result(job: Job, roles: list[str], pr: proc.ProcResult) -> JobResult:
    """A job whose sandbox, watched by compute-sanitizer, never started its worker: nothing was
    checked (fails closed; :func:`run_one` tries such a job once more)."""
    res = _error_result(job, STUCK, f"the sandbox of the {' and '.join(roles)} worker did not start it within "
                        f"{TOOL_START_LIMIT_S:.0f}s under compute-sanitizer (its bwrap init hung in the tool's "
                        f"injected code, as seen on an H100), and was ended: nothing was checked", pr)
    return dataclasses.replace(res, reason=f"{job.check} could not start its sandboxed worker")


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
           else "they were found re-parented to gpu-gate and killed")
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


def _judge_run(job: Job, opts: ExecOptions, pr: proc.ProcResult, inner: JobResult | None,
               timeout: float) -> JobResult:
    """The result of a job that writes its own (the compile check, which runs no code under review;
    the checks that wrap a tool, compute-sanitizer's, are judged jobs: see :func:`_run_judged`)."""
    if inner is None:
        kind, message = _classify_failure(job, pr, timeout)
        if pr.timed_out and timeout < opts.timeout_s:
            message += " (the whole run's time limit cut this job short)"
        return _error_result(job, kind, message, pr)
    inner.duration_s = pr.duration_s
    if pr.tail(5):
        inner.log_tail = pr.tail(40)
    # Which job this is and how much it matters are the gate's to say, not the result file's.
    return dataclasses.replace(inner, job_id=job.id, check=job.check, level=job.level,
                               spec=job.spec.id if job.spec else None, kernels=job.kernels)


def concurrency(opts: ExecOptions) -> int:
    """How many jobs run at once: one per GPU slot, else the CPU workers. Each job's CPU
    threads (the float64 reference, torch's CPU ops) get an equal share of the cores."""
    if opts.gpus:
        return len(opts.gpus) * max(1, opts.jobs_per_gpu)
    return max(1, opts.workers or 1)


def _read_result(path: Path) -> JobResult | None:
    try:
        return JobResult.from_json(json.loads(path.read_text()))
    except (OSError, ValueError, KeyError, TypeError):
        return None


def gpu_problem(gpu: str) -> str | None:
    """None if ``nvidia-smi`` still sees GPU ``gpu`` and its memory; else what it says."""
    r = proc.run(["nvidia-smi", "-i", gpu, "--query-gpu=name,memory.used", "--format=csv,noheader"], timeout=30)
    if r.ok and r.stdout.strip():
        return None
    return (r.stdout + r.stderr).strip().splitlines()[-1] if (r.stdout + r.stderr).strip() else r.describe()


def gpu_free_bytes(gpu: str) -> int | None:
    r = proc.run(["nvidia-smi", "-i", gpu, "--query-gpu=memory.free", "--format=csv,noheader,nounits"], timeout=30)
    try:
        return int(r.stdout.strip().splitlines()[0]) << 20 if r.ok else None
    except (ValueError, IndexError):
        return None


def memory_need(job: Job) -> int:
    """A job's expected peak GPU memory: the case budget and its copies, or a fixed allowance."""
    if job.check in ("equivalence", "determinism"):
        return 4 * int(job.options.get("max_case_bytes") or 256 << 20) + (512 << 20)
    return 2 << 30  # sanitizer runs use small cases but the tools keep shadow state


class GpuSlots:
    """Admits a job to a GPU when fewer than ``per_gpu`` jobs run there and, if others are
    running, the GPU has the free memory the job needs (a lone job always starts)."""

    def __init__(self, per_gpu: int, free: Callable[[str], int | None]) -> None:
        self.per_gpu = per_gpu
        self.free = free
        self.running: dict[str, int] = {}
        self.cond = threading.Condition()

    def acquire(self, gpu: str, need: int) -> None:
        with self.cond:
            while True:
                n = self.running.get(gpu, 0)
                if n == 0:
                    break
                if n < self.per_gpu:
                    free = self.free(gpu)
                    if free is None or free >= need:
                        break
                self.cond.wait(timeout=5)
            self.running[gpu] = self.running.get(gpu, 0) + 1

    def release(self, gpu: str) -> None:
        with self.cond:
            self.running[gpu] -= 1
            self.cond.notify_all()


def _gpu_problem(opts: ExecOptions, gpu: str | None) -> str | None:
    if gpu is None:
        return None
    probe = opts.health_probe or gpu_problem
    return probe(gpu)


def order_jobs(jobs: Sequence[Job]) -> list[Job]:
    """Longest first, sanitizer jobs interleaved with the others so one GPU is not all sanitizer."""
    plain = sorted((j for j in jobs if j.check not in SANITIZER_TOOLS), key=lambda j: (-j.cost, j.id))
    san = sorted((j for j in jobs if j.check in SANITIZER_TOOLS), key=lambda j: (-j.cost, j.id))
    out: list[Job] = []
    while plain or san:
        for group in (plain, san):
            if group:
                out.append(group.pop(0))
    return out


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
    ``store``, the bytecode kept from earlier runs (see gpu_gate.bytecode), where one is given."""
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


def _refused(job: Job, avail: sandbox.Available) -> JobResult:
    return JobResult(job_id=job.id, check=job.check, status=Status.NOT_RUN, level=job.level,
                     spec=job.spec.id if job.spec else None, kernels=job.kernels,
                     reason=f"not run: runner.sandbox is required and no sandbox works here ({avail.detail})")


def execute(jobs: Sequence[Job], opts: ExecOptions, progress: ProgressFn | None = None,
            control: RunControl | None = None) -> list[JobResult]:
    """Run every job; one worker per GPU (or ``opts.workers`` CPU workers without one)."""
    control = control or RunControl()
    if opts.sandbox is None:
        return execute(jobs, dataclasses.replace(opts, sandbox=sandbox.choose(opts.sandbox_mode)), progress, control)
    if opts.sandbox_mode == "required" and not opts.sandbox.works:
        return [_refused(j, opts.sandbox) for j in order_jobs(jobs)]
    if not opts.sandbox.works:
        # Orphans of the jobs come to the gate instead of init, where they can be found and killed.
        sandbox.become_subreaper()
    if opts.pycache is None and jobs:  # no job to run: nothing to prepare for
        with shared_bytecode(opts.work_root) as pycache:
            if pycache is not None:
                return execute(jobs, dataclasses.replace(opts, pycache=pycache), progress, control)
    ordered = order_jobs(jobs)
    per_gpu = max(1, opts.jobs_per_gpu)
    # GPU by GPU, then again: the first (longest) jobs go one to each GPU
    slots: list[str | None] = [g for _ in range(per_gpu) for g in opts.gpus] if opts.gpus else \
        [None] * max(1, opts.workers or 1)
    gpu_slots = GpuSlots(per_gpu, opts.free_memory or gpu_free_bytes)
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
                if gpu is not None:
                    gpu_slots.acquire(gpu, memory_need(job))
                began = time.monotonic() - start
                try:
                    res = run_one(job, lead(gpu, job), gpu, control)
                    outside = res.extra.get("timing", {}).get("outside") if isinstance(res.extra, dict) else None
                    if isinstance(outside, dict):
                        outside["began_s"] = round(began, 2)  # after the run's start (a GPU slot's wait)
                except Exception as exc:  # noqa: BLE001 - one job's failure never stops the run
                    res = _error_result(job, "internal-error", f"internal error running the job: {exc}", None)
                finally:
                    led(gpu, job)
                    if gpu is not None:
                        gpu_slots.release(gpu)
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
