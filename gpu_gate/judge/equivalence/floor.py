"""A minimum of verified cases that the candidate cannot spend, and its time accounted apart.

The equivalence check's time budget (``time_budget_s``) is gpu-gate's own time: building inputs,
the reference, comparisons. Before, it was wall clock and counted the candidate's calls too, so
a first call that slept 70 s ("autotuning") left one case of six verified, and a bug on float16
was never run. Now:

- **the floor**: the cases the budget cannot skip: the first case of every dtype and of every
  layout (each input's, and the upstream gradient's) the schedule holds, and the first
  ``GPU_FLOOR`` cases on a GPU (``CPU_FLOOR`` on the CPU, where the Triton interpreter takes
  seconds a case). Once the budget is spent, only floor cases run; a job that cannot reach its
  floor before the job's own time limit is ``not-run``, with the reason (blocks under
  ``not_run: fail``);
- **two clocks**: the candidate's calls (the head's worker's busy time) extend the deadline,
  up to ``candidate_budget_s`` in all; a case whose candidate calls take more than
  ``slow_case_s`` is a ``slow-case`` finding (``slow_case: warn`` by default: a slow kernel is
  not a wrong one, and the cases still run; ``fail`` blocks it).
"""
from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from ...findings import Finding, Severity

if TYPE_CHECKING:
    from ...protocol.cases import Case

GPU_FLOOR = 16
CPU_FLOOR = 4
SLOW_CASE_S = {"cuda": 10.0, "cpu": 60.0}  # a case's candidate calls, by default (interpreted Triton is slow)


def floor(cases: Sequence[Case], device: str) -> set[int]:
    """Indices of the cases no budget may skip (see the module docstring)."""
    picked = set(range(min(GPU_FLOOR if device == "cuda" else CPU_FLOOR, len(cases))))
    seen: set[tuple[str, ...]] = set()
    for i, case in enumerate(cases):
        kinds: set[tuple[str, ...]] = {("grad", case.grad_layout)}
        for name, choice in case.inputs.items():
            kinds |= {("dtype", name, choice.dtype), ("layout", name, choice.layout)}
        if kinds - seen:
            picked.add(i)
            seen |= kinds
    return picked


@dataclasses.dataclass
class Clock:
    """gpu-gate's own time and the candidate's, accounted apart."""

    own_s: float  # time_budget_s: gpu-gate's own work
    candidate_s: float  # the candidate's calls may add up to this much
    hard: float  # the job's own deadline: nothing runs past it
    busy: Callable[[], float]  # the candidate's busy seconds so far
    start: float = dataclasses.field(default_factory=time.monotonic)
    busy0: float = 0.0

    def __post_init__(self) -> None:
        self.busy0 = self.busy()

    def candidate(self) -> float:
        return self.busy() - self.busy0

    def deadline(self) -> float:
        return min(self.hard, self.start + self.own_s + min(self.candidate(), self.candidate_s))


def slow_case_finding(spec_id: str, slow: list[tuple[str, float]], limit: float, level: str) -> Finding:
    worst = max(slow, key=lambda s: s[1])
    ids = ", ".join(c for c, _ in slow[:8]) + (f" and {len(slow) - 8} more" if len(slow) > 8 else "")
    blocks = level == "fail"
    return Finding(check="equivalence", kind="slow-case", spec=spec_id,
                   severity=Severity.ERROR if blocks else Severity.WARNING,
                   details={"cases": [c for c, _ in slow], "worst_s": round(worst[1], 2), "limit_s": limit},
                   message=f"the kernel's calls took more than {limit:g} s on {len(slow)} case(s) ({ids}; the worst "
                           f"{worst[1]:.1f} s on {worst[0]}): the cases ran all the same, on the candidate's own time "
                           f"({'blocks: `slow_case: fail`' if blocks else 'slow_case: warn'}; slow_case_s sets the limit)")


def floor_missed_reason(ran: int, total: int, floor_size: int, missing: int, candidate_s: float) -> str:
    return (f"the floor of {floor_size} cases (every dtype and layout, at least {GPU_FLOOR} on a GPU, {CPU_FLOOR} on "
            f"the CPU) was not reached before the job's time limit: {missing} floor case(s) not run, {ran} of {total} "
            f"cases run, the kernel's calls took {candidate_s:.1f} s (raise runner.job_timeout_minutes, or make the "
            f"kernel's first calls faster)")
