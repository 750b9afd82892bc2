"""Shrink a failing case while the failure holds: smaller dims, plainer layouts and values."""
from __future__ import annotations

import dataclasses
import time
from typing import Any

from ..findings import Finding
from ..spec import Spec
from .cases import Case


def _fails(runner: Any, case: Case, kind: str) -> Finding | None:
    try:
        r = runner.run(case, sensitivity=False)
    except Exception:  # noqa: BLE001 - a different failure is not the one being shrunk
        return None
    for f in r.findings:
        if f.kind == kind:
            return f
    return None


def _smaller_sizes(spec: Spec, name: str, n: int) -> list[int]:
    dim = spec.dims[name]
    cands = [dim.lo, 1, 2, 3, 4, 7, 8, 16, 17, 31, 32, 33, n // 4, n // 2, n - 1]
    out = sorted({c for c in cands if c < n and dim.allows(c)})
    return out


def shrink(runner: Any, spec: Spec, finding: Finding, deadline: float) -> Finding:
    token = finding.details.get("token")
    if not token:
        return finding
    case = Case.from_token(token)
    best, best_finding = case, finding
    steps = 0

    def attempt(candidate: Case) -> bool:
        nonlocal best, best_finding, steps
        if time.monotonic() > deadline:
            return False
        f = _fails(runner, candidate, finding.kind)
        if f is not None:
            best, best_finding = candidate, f
            steps += 1
            return True
        return False

    progress = True
    while progress and time.monotonic() < deadline:
        progress = False
        for name in spec.dims:
            for n in _smaller_sizes(spec, name, best.dims[name]):
                trial = dataclasses.replace(best, id=f"{case.id}s", dims={**best.dims, name: n})
                if attempt(trial):
                    progress = True
                    break
    for name, choice in best.inputs.items():
        for change in ({"layout": "contiguous"}, {"dist": "normal", "param": 0.0}):
            if all(getattr(choice, k) == v for k, v in change.items()):
                continue
            new = dataclasses.replace(choice, **change)
            trial = dataclasses.replace(best, inputs={**best.inputs, name: new})
            if attempt(trial):
                choice = new
    if steps == 0:
        return finding
    msg = best_finding.message + f"\n(shrunk from {case.describe()} to {best.describe()})"
    return dataclasses.replace(best_finding, message=msg, case=best.id,
                               details={**best_finding.details, "original_case": case.describe()})
