"""What a run's executor is told: :class:`ExecOptions`, and how many jobs it runs at once."""
from __future__ import annotations

import dataclasses
from collections.abc import Callable
from pathlib import Path
from typing import Literal
from . import sandbox


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
    # (commit, its work tree): where a job's reference worker loads the truth from (protocol.jobs.truth_commit)
    truth_roots: tuple[tuple[str, Path], ...] = ()
    # Triton kernels the base's code compiled in earlier runs (see compiled_store): in the result cache
    kernel_store: Path | None = None
    # The interpreter the workers run with (never the judge): the venv that the sandboxed `setup` installed
    # the repository into (gpu_gate.github.setup_sandbox). None: this interpreter
    worker_python: Path | None = None
    # CPU priority of the job's processes (``nice``): 0 for each GPU's lead job, the one that started
    # while none of its others ran (the longest, by ``order_jobs``); LESS_URGENT for the jobs beside it
    nice: int = 0
    # the policy's runner.infrastructure: a failure of the runner's tools that persists over its runs
    # (see gpu_gate.executor.infrastructure) is an error (fail) or leaves the check not run (not_run)
    infrastructure: Literal["fail", "not_run"] = "not_run"
    # GPU index -> its memory in bytes, for reservations across the runner's gates (default: nvidia-smi);
    # where they are kept (default: gpu_gate.executor.reservations.runner_dir())
    gpu_memory: Callable[[str], int | None] | None = None
    reservations_dir: Path | None = None


LESS_URGENT = 10  # the nice value of the jobs that run beside a GPU's lead job


def concurrency(opts: ExecOptions) -> int:
    """How many jobs run at once: one per GPU slot, else the CPU workers. Each job's CPU
    threads (the float64 reference, torch's CPU ops) get an equal share of the cores."""
    if opts.gpus:
        return len(opts.gpus) * max(1, opts.jobs_per_gpu)
    return max(1, opts.workers or 1)
