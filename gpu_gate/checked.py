"""What a run checked, in words every report shares (issue 40, part 7): cases planned and run,
dtypes that did not run, and the GPU-only checks that could not run on this machine.

A local run on the CPU (``check --cpu``, or no GPU found, outside CI) lists GPU-only checks as
"not run here" without failing on them: they cannot run there, and a gate that is red on every
local run is one nobody runs. In CI (``CI`` or ``GITHUB_ACTIONS`` set) they fail closed as ever."""
from __future__ import annotations

import os
import re
from collections.abc import Iterable, Mapping

from .findings import JobResult, Status

__all__ = ["NO_GPU", "case_words", "dtypes_not_run", "gpu_only_not_run", "in_ci", "planned", "summary"]

NO_GPU = "no GPU"  # how the reason of a job that needs a CUDA device, on a machine without one, begins
_DROPPED = re.compile(r"^(?P<dtypes>.+?) cases not run: ", re.S)


def in_ci(env: Mapping[str, str] | None = None) -> bool:
    """A CI run: where a check that could not run fails closed whatever the machine."""
    env = os.environ if env is None else env
    return any(env.get(k, "").strip().lower() not in ("", "0", "false") for k in ("CI", "GITHUB_ACTIONS"))


def gpu_only_not_run(r: JobResult) -> bool:
    """A job not run because this machine has no GPU (not for anything the change did)."""
    return r.status is Status.NOT_RUN and (r.reason or "").startswith(NO_GPU)


def planned(r: JobResult) -> int | None:
    value = r.extra.cases_planned
    return int(value) if isinstance(value, int) and not isinstance(value, bool) else None


def case_words(r: JobResult) -> str:
    """"9 of 24 cases" where fewer ran than were planned, else "9 cases"."""
    want = planned(r)
    noun = "case" if (want or r.cases) == 1 else "cases"
    if want is not None and want > r.cases:
        return f"{r.cases} of {want} {noun}"
    return f"{r.cases} {noun}"


def dtypes_not_run(results: Iterable[JobResult]) -> list[str]:
    """The dtypes a check dropped (bf16 under the Triton interpreter, say), each once."""
    out: list[str] = []
    for r in results:
        for f in r.findings:
            if f.kind != "dtype-not-run":
                continue
            names = f.details.get("dtypes")
            if not isinstance(names, list):
                m = _DROPPED.match(f.message)
                names = [n.strip() for n in m["dtypes"].split(",")] if m else []
            out += [str(n) for n in names if str(n) not in out]
    return out


def summary(results: list[JobResult]) -> str:
    """The headline's account of what ran: "9 of 24 cases run; float16 not run" (empty: nothing to say)."""
    ran = sum(r.cases for r in results if r.check == "equivalence")
    want = sum(planned(r) or r.cases for r in results if r.check == "equivalence")
    parts = []
    if want:
        parts.append(f"{ran} of {want} equivalence cases run" if want > ran else f"{ran} equivalence cases run")
    dropped = dtypes_not_run(results)
    if dropped:
        parts.append(f"{', '.join(dropped)} not run")
    return "; ".join(parts)
