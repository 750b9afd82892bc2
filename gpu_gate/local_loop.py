"""The local loop: how a run on one's own machine differs from a run in CI (issue 42).

On a developer's machine gpu-gate is a loop: change, check, read, change again. Two settings of
the equivalence check make it answer in minutes there without touching what CI decides:

- ``stop_at_red`` (default ``local``): once a job is red for a failure that stood its
  confirmation (new against the base's code and outside its run-to-run range, or any blocking
  failure where there is no base), the rest of its cases, the growth sweep and the replays are not
  run; the failing case is still shrunk. In CI every case runs and every failing output is listed.
- ``local_time_budget_s`` (default 90 s): on the CPU outside CI, where the Triton interpreter takes
  seconds a case, gpu-gate's own time and the kernel's are each capped at it. The floor (every dtype
  and layout, at least 4 cases) still runs; the report says how many of the planned cases ran.

"Outside CI" is :func:`gpu_gate.checked.in_ci` false: neither ``CI`` nor ``GITHUB_ACTIONS`` set, the
same test that lets a local run list GPU-only checks as not run here; ``check --full`` runs as CI does
(``gpu-gate audit`` passes it: an audit judges submissions, it is not a developer's loop). The resolved
values travel in the job's options, so a result of the local loop is never a cache hit for a CI run."""
from __future__ import annotations

import dataclasses
from collections.abc import Iterable

from .protocol.jobs import Job

__all__ = ["adapt", "stops_at_red"]


def stops_at_red(setting: object, ci: bool) -> bool:
    """``stop_at_red`` resolved for this run: ``always``, or ``local`` outside CI."""
    return setting == "always" or (setting == "local" and not ci)


def adapt(jobs: Iterable[Job], *, gpu: bool, ci: bool) -> tuple[list[Job], list[str]]:
    """The jobs with the local loop's settings resolved, and a note for each thing it changed."""
    out: list[Job] = []
    capped: float | None = None
    stopping = False
    for job in jobs:
        o = job.options
        if "stop_at_red" not in o:
            out.append(job)
            continue
        opts = dict(o)
        opts["stop_at_red"] = stops_at_red(o.get("stop_at_red"), ci)
        stopping |= opts["stop_at_red"] and not ci
        cap = o.get("local_time_budget_s")
        if not gpu and not ci and isinstance(cap, (int, float)) and not isinstance(cap, bool):
            own = float(o.get("time_budget_s") or 300)
            theirs = float(o.get("candidate_budget_s") or own)
            if cap < own or cap < theirs:
                opts["time_budget_s"], opts["candidate_budget_s"] = min(own, cap), min(theirs, cap)
                capped = float(cap)
        out.append(dataclasses.replace(job, options=opts))
    notes = []
    if capped is not None:
        notes.append(f"a local run on the CPU: the equivalence cases had {capped:g} s of gpu-gate's own time and "
                     f"{capped:g} s of the kernels' (checks.equivalence.local_time_budget_s); in CI the policy's "
                     f"budgets hold and every planned case can run")
    if stopping:
        notes.append("a local run: an equivalence job stops at its first confirmed new failure (checks.equivalence."
                     "stop_at_red: local); in CI every case runs")
    return out, notes
