"""A case that does not fit in the GPU's memory is run smaller, never an error.

Under load (three gates per GPU on H200s) a determinism job's float64 reference hit CUDA out of
memory: its contention case had been sized from the memory free when the job started, which the
other jobs then took. Running out of memory says nothing about the kernel: the case is run again
smaller (a contention case at a quarter of its budget, down to a floor), and a case that never
fits is left out with a note, not counted as checked."""
from __future__ import annotations

import re
from collections.abc import Callable
from typing import TypeVar

from ...protocol.cases import Case

R = TypeVar("R")

_OOM = re.compile(r"out of memory|OutOfMemoryError|CUBLAS_STATUS_ALLOC_FAILED", re.IGNORECASE)

# In job.options: the bytes the executor reserved for the job on its GPU (gpu_gate.executor.reservations);
# the contention cases are sized against it, not against the memory free when the job starts.
RESERVED = "reserved_bytes"

FLOOR = 64 << 20  # the smallest contention budget tried (gpu_budget's floor)
SHRINK = 4  # each run again takes a quarter of the budget before


def is_oom(exc: BaseException) -> bool:
    return bool(_OOM.search(f"{type(exc).__name__}: {exc}"))


def free_cached() -> None:
    """Give the judge's cached GPU blocks back before a run again (the other jobs' need them too)."""
    try:
        import torch

        if torch.cuda.is_available():
            torch.cuda.empty_cache()
    except Exception:  # noqa: BLE001 - no torch, no GPU: nothing cached
        pass


def run_fitting(run: Callable[[Case], R], case: Case, smaller: Callable[[Case, int], Case | None],
                notes: list[str]) -> R | str:
    """``run(case)``; where the reference runs out of memory (the judge's SpecBroken), ``run`` again
    on ``smaller(case, attempt)`` (None: nothing smaller to try). A case that never fits returns a
    string (the caller's "not run" result) and adds a note to ``notes``."""
    from ..workers import SpecBroken

    attempt = 0
    tried = case
    while True:
        try:
            out = run(tried)
        except SpecBroken as exc:
            if not is_oom(exc):
                raise
            attempt += 1
            free_cached()
            nxt = smaller(case, attempt)
            if nxt is None:
                notes.append(f"case {case.id} ({case.describe()[:80]}) was left out: out of GPU memory in "
                             f"{attempt} run(s), the smallest {tried.describe()[:80]}")
                return "out of memory"
            tried = nxt
            continue
        if attempt:
            notes.append(f"case {case.id} ran smaller after running out of GPU memory {attempt} time(s): "
                         f"{tried.describe()[:80]}")
        return out
