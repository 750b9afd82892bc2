"""What the judge accepts from a worker, and the memory it allows itself.

A worker's reply may carry at most the bytes the judge asked for. The judge does not know an
output's shape before the code under review returns it, so each reply that carries tensors (a
call's outputs, the truth on a case) is bounded by the case's own size: ``REPLY_FACTOR`` times the
case's bytes as the schedule counts them (:func:`gpu_gate.protocol.cases.case_bytes`: every input,
its float64 copy and a clone, three times over), plus ``REPLY_FLOOR`` for small cases and guard
bytes. A reply of the other kinds carries no blob at all. What a header claims beyond that is a
protocol finding before a byte of it is read (see :mod:`gpu_gate.judge.channel`).

The judge's process then bounds its own data (``RLIMIT_DATA``: heap and private writable mappings;
not the address space, which CUDA reserves by the terabyte): ``JUDGE_BASE`` for Python, torch and
the driver's host side, plus ``CASE_COPIES`` times the largest case the job may build (its
``max_case_bytes``, or a production shape's on a GPU), never more than the machine's memory. With
the default policy that is 10 GiB on a CPU runner and 72 GiB, or the machine's memory if less, on a
GPU one. A judge that reaches it fails its job closed; the runner and its other jobs are unharmed.
"""
from __future__ import annotations

import os
import resource
from typing import TYPE_CHECKING, Any

from ..protocol.cases import PRODUCTION_CASE_BYTES, case_bytes

if TYPE_CHECKING:
    from ..protocol.cases import Case
    from ..spec import Spec

REPLY_FLOOR = 64 << 20
REPLY_FACTOR = 16
JUDGE_BASE = 8 << 30
CASE_COPIES = 8
DEFAULT_CASE_BYTES = 256 << 20  # the policy's default max_case_bytes


def reply_budget(spec: Spec, case: Case) -> int:
    """The most blob bytes a reply about ``case`` may carry (a call's, or the reference's truth)."""
    return REPLY_FLOOR + REPLY_FACTOR * case_bytes(spec, case.dims, case.inputs)


def memory_limit(options: dict[str, Any], device: str, machine: int | None) -> int:
    """The judge's own data limit for a job with these check options, on ``device``, on a machine
    with ``machine`` bytes of memory (None: unknown)."""
    largest = int(options.get("max_case_bytes") or DEFAULT_CASE_BYTES)
    if device == "cuda":
        largest = max(largest, PRODUCTION_CASE_BYTES)
    want = JUDGE_BASE + CASE_COPIES * largest
    return min(want, machine) if machine else want


def machine_memory() -> int | None:
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError):
        return None


def limit_memory(options: dict[str, object], device: str) -> int | None:
    """Set this process's data limit (see the module's docstring); the limit now in force, or None
    where there is none. A lower limit already set is kept."""
    want = memory_limit(options, device, machine_memory())
    soft, hard = resource.getrlimit(resource.RLIMIT_DATA)
    if hard != resource.RLIM_INFINITY:
        want = min(want, hard)
    if soft != resource.RLIM_INFINITY and soft <= want:
        return soft
    try:
        resource.setrlimit(resource.RLIMIT_DATA, (want, hard))
    except (ValueError, OSError):
        return None if soft == resource.RLIM_INFINITY else soft
    return want
