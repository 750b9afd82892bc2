"""The command lines, environments and sandbox layouts of a job's processes: the judge's (outside
the sandbox) and the workers' (inside it), with nothing that names gpu-gate."""
from __future__ import annotations

import os
import shutil
import sys
import tempfile
from pathlib import Path
from . import gpu_nodes, sandbox
from .. import proc
from ..judge.checks import CHECKS, check_info
from ..protocol.jobs import Job
from .options import ExecOptions


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
    builds = CHECKS[check].compiler.builds  # a check that builds the kernels needs Triton's real compiler
    if gpu is None and not builds:
        extra["TRITON_INTERPRET"] = "1"  # Triton kernels run on the CPU through the interpreter
    env = proc.scrubbed_env(extra=extra)
    for name in list(env):
        if name.startswith(_GATE_ENV_PREFIXES):
            del env[name]
    if builds:
        env.pop("TRITON_INTERPRET", None)
    return env


# OpenMP's wait policy in the judge (see judge_env): its threads (torch's, comparing on the CPU) sleep
# between parallel regions instead of spinning after each one (libgomp's default), which held a core
# while the judge waited on its workers, a core the runner's other jobs need. Only in the judge: in a
# worker or the disguised replay the variable would be one more sign of gpu-gate's process that code
# under test could read; the runner's own setting, where it has one, reaches every process as it is.
WAIT_POLICY = "PASSIVE"


def judge_env(env: dict[str, str], judge_dir: Path) -> dict[str, str]:
    """The judge's environment: the job's (``env``), its temporary files in its own directory, and
    OpenMP's threads asleep when idle (WAIT_POLICY)."""
    return {**env, "TMPDIR": str(judge_dir), "OMP_WAIT_POLICY": os.environ.get("OMP_WAIT_POLICY") or WAIT_POLICY}


def judge_argv(opts: ExecOptions, job_file: Path, result_file: Path) -> list[str]:
    """The judge's command line: gpu-gate's own process, outside the sandbox."""
    return [sys.executable, "-I", *_flags(opts), "-c", _BOOT, str(job_file), str(result_file)]


def _flags(opts: ExecOptions) -> list[str]:
    flags = ["-u"]
    if opts.pycache is not None:
        flags += ["-X", f"pycache_prefix={opts.pycache}"]
    else:
        flags.append("-B")
    return flags


def worker_argv(opts: ExecOptions, context_file: Path, *, role: str, fd: int) -> list[str]:
    """A worker's command line: it serves ``role`` (see :mod:`gpu_gate.protocol.roles`) on socket
    ``fd``. ``-I`` (isolated): no PYTHON* variables, no user site, and neither the working directory
    nor the script's directory on sys.path, so a repository file ``gpu_gate/worker/serve.py`` (or
    ``torch.py``) cannot stand in for the installed one; the worker puts the repository on sys.path
    itself, behind the standard library (see worker.loader.user_path)."""
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
    # The base's code too: what it does is what the head is judged against, and what it compiles is
    # kept for later runs (a .pth planted by the head's setup would run in the base's worker).
    trusted = role in ("reference", "base")
    python = str(opts.worker_python) if opts.worker_python is not None and not trusted else sys.executable
    # the boot program, with the role, the socket and the context, comes on stdin (see worker_boot)
    return [python, "-I", *flags, "-"]


# Where gpu-gate is not installed in site-packages (run from a source tree through PYTHONPATH,
# which -I ignores), its own directory is added at the end of sys.path: never ahead of anything.
_BOOT = ("import sys, importlib.util\n"
         f"if importlib.util.find_spec('gpu_gate') is None: sys.path.append({str(sandbox.gate_package_dir().parent)!r})\n"
         "from gpu_gate.judge.job import main\n"
         "sys.exit(main())")


def worker_boot(fd: int, role: str, context: dict[str, object]) -> bytes:
    """What a judged job's worker reads on its standard input: the program that starts it looking like
    a user's ``python train.py`` (see gpu_gate.worker.disguise)."""
    from ..worker.disguise import boot_program

    return boot_program(sandbox.gate_package_dir(), fd, role, context)


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
    # hidden one lies inside it (the demo's reports under a source checkout), or lie inside a hidden
    # one (a work tree hidden from jobs that run an export of the head commit).
    own = sandbox.gate_package_dir()
    if not any(h == own or own in h.parents for h in covered[:-1]):
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


def _context(opts: ExecOptions, gpu: str | None, job: Job) -> dict[str, object]:
    """What the judge needs to know, handed over in its job file rather than in variables
    that a kernel could read to tell it is being tested."""
    return {"repo_root": str(opts.repo_root), "budget_s": max(1.0, opts.timeout_s * 0.8),
            "device": None if gpu is not None else "cpu",
            "sanitizer": job.check if _tool(job) == "compute-sanitizer" else None}


def _tool(job: Job) -> str | None:
    info = check_info(job.check)
    return info.tool if info is not None else None


def _niced(argv: list[str], opts: ExecOptions) -> list[str]:
    """``argv`` at the job's CPU priority: a job beside the GPU's lead job yields the cores to it, so
    that the job that ends last, and decides the gate's wall time, is not slowed by jobs that end
    before it anyway (they take the cores it leaves idle, while it waits on the GPU or a worker)."""
    if opts.nice <= 0:
        return argv
    nice = shutil.which("nice")
    return [nice, "-n", str(opts.nice), *argv] if nice else argv


# How a worker's host thread waits for its GPU (see gpu_gate.worker.cuda_sync): sleeping, by default,
# so that waiting workers leave the runner's cores to the jobs with host work to do. GPU_GATE_CUDA_SYNC
# (auto, spin, yield, blocking) overrides it: "auto" is CUDA's own default, which spins. A worker that
# runs under compute-sanitizer keeps CUDA's default (the tool's own threads wait as they do; the mode
# has not been measured under it).
CUDA_SYNC_DEFAULT = "blocking"


def _worker_context(opts: ExecOptions, gpu: str | None, root: Path | None = None, *,
                    under_tool: bool = False) -> dict[str, object]:
    sync = os.environ.get("GPU_GATE_CUDA_SYNC") or CUDA_SYNC_DEFAULT
    return {"repo_root": str(root or opts.repo_root), "device": None if gpu is not None else "cpu",
            **({"cuda_sync": sync} if gpu is not None and not under_tool else {})}
