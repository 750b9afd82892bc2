"""Shrink a failing case while the failure holds: smaller dims, plainer layouts and values.

Greedy and bounded by a deadline: each dim is tried at its smallest sizes first, then
every input at a contiguous layout, plainer values and milder distribution parameters.
The shrunk case keeps its seed, so its token re-runs exactly what failed.
"""
from __future__ import annotations

import dataclasses
import time
from typing import TYPE_CHECKING

from ...findings import Finding
from ...spec import Spec
from ...protocol.cases import Case, InputChoice, applicable
from ...protocol.inputs import shape_of

if TYPE_CHECKING:
    from .engine import CaseRunner

MILDER = {"offset": (8.0, 64.0), "peaked": (8.0, 12.0, 16.0, 20.0)}


def _fails(runner: CaseRunner, case: Case, finding: Finding) -> Finding | None:
    from ..channel import ProtocolViolation

    try:
        r = runner.run(case, sensitivity=finding.kind == "insensitive")
    except ProtocolViolation:
        raise  # the job's verdict: the worker broke the protocol
    except Exception:  # noqa: BLE001 - a different failure is not the one being shrunk
        return None
    want = finding.details.get("output")
    # a failure this change made shrinks to a case the base's code passes: never to the repository's debt
    change = finding.details.get("change")
    found: list[Finding] = [f for f in r.findings
                            if f.kind == finding.kind and (want is None or f.details.get("output") == want)
                            and (change != "new" or f.details.get("change") == "new")]
    return found[0] if found else None


def _smaller_sizes(spec: Spec, name: str, n: int) -> list[int]:
    dim = spec.dims[name]
    cands = [dim.lo, 1, 2, 3, 4, 7, 8, 16, 17, 31, 32, 33, 61, 97, n // 4, n // 2, n - 1]
    return sorted({c for c in cands if 0 <= c < n and dim.allows(c)})


def _plainer(choice: InputChoice) -> list[InputChoice]:
    out = []
    if choice.layout != "contiguous":
        out.append(dataclasses.replace(choice, layout="contiguous"))
    for p in MILDER.get(choice.dist, ()):
        if p < choice.param:
            out.append(dataclasses.replace(choice, param=p))
    if choice.dist == "normal" and choice.param > 0:  # the extreme magnitude: a unit scale
        out.append(dataclasses.replace(choice, param=0.0))
    if choice.couple:  # an index at its input's peak: drawn apart from it
        out.append(dataclasses.replace(choice, couple="", param=0.0))
    if choice.dist not in ("normal", "uniform") and choice.dtype.startswith("float"):
        out.append(dataclasses.replace(choice, dist="normal", param=0.0))
    elif choice.dist not in ("uniform",) and not choice.dtype.startswith("float"):
        out.append(dataclasses.replace(choice, dist="uniform"))
    return out


class _Shrinker:
    def __init__(self, runner: CaseRunner, spec: Spec, finding: Finding, case: Case, deadline: float) -> None:
        self.runner, self.spec, self.finding, self.deadline = runner, spec, finding, deadline
        self.best, self.best_finding, self.steps = case, finding, 0

    def attempt(self, trial: Case) -> bool:
        if time.monotonic() > self.deadline:
            return False
        trial = self._consistent(trial)
        f = _fails(self.runner, trial, self.finding)
        if f is None:
            return False
        self.best, self.best_finding = trial, f
        self.steps += 1
        return True

    def _consistent(self, case: Case) -> Case:
        """Layouts that a smaller shape no longer allows are recorded as what actually runs."""
        inputs = {k: dataclasses.replace(c, layout=applicable(c.layout, shape_of(self.spec.inputs[k].shape,
                                                                                  case.dims)))
                  for k, c in case.inputs.items()}
        return dataclasses.replace(case, inputs=inputs)

    def dims(self) -> None:
        progress = True
        while progress and time.monotonic() < self.deadline:
            progress = False
            for name in self.spec.dims:
                for n in _smaller_sizes(self.spec, name, self.best.dims[name]):
                    # a planned case's reason names its sizes: the smaller case is not that one
                    if self.attempt(dataclasses.replace(self.best, dims={**self.best.dims, name: n}, why="")):
                        progress = True
                        break

    def values(self) -> None:
        for name in list(self.best.inputs):
            for new in _plainer(self.best.inputs[name]):
                self.attempt(dataclasses.replace(self.best, inputs={**self.best.inputs, name: new}))
        if self.best.grad_layout != "contiguous":
            self.attempt(dataclasses.replace(self.best, grad_layout="contiguous"))


def shrink(runner: CaseRunner, spec: Spec, finding: Finding, deadline: float) -> Finding:
    token = finding.details.get("token")
    if not token:
        return finding
    case = Case.from_token(token)
    s = _Shrinker(runner, spec, finding, dataclasses.replace(case, id=f"{case.id}s"), deadline)
    s.dims()
    s.values()
    s.dims()  # plainer values sometimes let the sizes go further down
    if s.steps == 0:
        return finding
    best, f = s.best, s.best_finding
    msg = f.message + f"\n(shrunk from {case.describe()} to {best.describe()})"
    return dataclasses.replace(f, message=msg, case=best.id,
                               details={**f.details, "original_case": case.describe(),
                                        "original_token": case.token(), "shrink_steps": s.steps})
