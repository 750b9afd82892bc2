"""The runner's GPUs: which are visible, whether one is still healthy, and the slots that admit a
job to a GPU when it has the memory the job needs."""
from __future__ import annotations

import functools
import os
import shutil
import threading
from collections.abc import Callable
from .. import proc
from ..judge.checks import check_info
from ..protocol.jobs import Job
from .options import ExecOptions
from .reservations import Reservations


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
    info = check_info(job.check)  # a plan file's unknown check fails in its job, not here
    if info is not None and info.memory == "cases":
        return 4 * int(job.options.get("max_case_bytes") or 256 << 20) + (512 << 20)
    return 2 << 30  # sanitizer runs use small cases but the tools keep shadow state


class GpuSlots:
    """Admits a job to a GPU when fewer than ``per_gpu`` of this gate's jobs run there and its
    memory need fits beside every reservation on that GPU, this runner's other gates' included
    (:mod:`gpu_gate.executor.reservations`; a job alone on its GPU always starts). Where the GPU's
    memory is unknown, or the ledger cannot be used, it falls back to ``free``: the memory free now."""

    def __init__(self, per_gpu: int, free: Callable[[str], int | None],
                 reservations: Reservations | None = None) -> None:
        self.per_gpu = per_gpu
        self.free = free
        self.reservations = reservations
        self.running: dict[str, int] = {}
        self.cond = threading.Condition()

    def acquire(self, gpu: str, need: int) -> str | None:
        """Wait for a place on ``gpu``; the reservation's token (None: nothing reserved)."""
        with self.cond:
            while True:
                n = self.running.get(gpu, 0)
                if n < self.per_gpu:
                    admitted, token = self._fits(gpu, need, n)
                    if admitted:
                        break
                self.cond.wait(timeout=0.5 if self.reservations is not None else 5)
            self.running[gpu] = n + 1
            return token

    def _fits(self, gpu: str, need: int, n: int) -> tuple[bool, str | None]:
        if self.reservations is not None and self.reservations.knows(gpu):
            try:
                token = self.reservations.try_reserve(gpu, need)
                return token is not None, token
            except OSError:
                pass  # no ledger: the snapshot below
        if n == 0:
            return True, None
        free = self.free(gpu)
        return free is None or free >= need, None

    def release(self, gpu: str, token: str | None = None) -> None:
        with self.cond:
            self.running[gpu] -= 1
            if token is not None and self.reservations is not None:
                try:
                    self.reservations.release(gpu, token)
                except OSError:
                    pass  # a ledger gone: its reservation goes with it
            self.cond.notify_all()


def gpu_total_bytes(gpu: str) -> int | None:
    r = proc.run(["nvidia-smi", "-i", gpu, "--query-gpu=memory.total", "--format=csv,noheader,nounits"], timeout=30)
    try:
        return int(r.stdout.strip().splitlines()[0]) << 20 if r.ok else None
    except (ValueError, IndexError):
        return None


def _gpu_problem(opts: ExecOptions, gpu: str | None) -> str | None:
    if gpu is None:
        return None
    probe = opts.health_probe or gpu_problem
    return probe(gpu)
