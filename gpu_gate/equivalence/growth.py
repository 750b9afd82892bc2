"""Error growth along a reduction dim: sweep its length and compare how fast the
candidate's error grows with how fast torch's own dtype-precision error grows.

A bf16 accumulator is *more* accurate than torch's bf16 sum at short lengths and
hundreds of times worse at 2**18 (FACTS.md): single cases miss it; the slope does not.
"""
from __future__ import annotations

import shlex
from typing import Any

from ..findings import Finding, Severity
from ..spec import Index, Spec
from .cases import MAX_REDUCTION, Case, InputChoice, case_bytes, growth_sizes, log_slope
from .compare import EPS, floor_for

SLOPE_MARGIN = 0.3


def _small(spec: Spec, name: str) -> int:
    dim = spec.dims[name]
    for n in (4, 3, 2, 1, dim.lo):
        if dim.allows(n):
            return n
    return dim.lo


def _case(spec: Spec, dim: str, n: int, dtype: str, seed: int) -> Case:
    dims = {d: (n if d == dim else _small(spec, d)) for d in spec.dims}
    inputs = {}
    for name, inp in spec.inputs.items():
        if isinstance(inp, Index):
            inputs[name] = InputChoice(inp.dtype, "uniform", "contiguous")
        else:
            dists = inp.dists or ("uniform_pos",)
            dist = "uniform_pos" if "uniform_pos" in dists else dists[0]
            own = dtype if (inp.dtypes and dtype in inp.dtypes) or (inp.dtype or "").startswith("like:") else \
                (inp.dtype or (inp.dtypes or ("float32",))[0])
            inputs[name] = InputChoice(own, dist, "contiguous")
    return Case(f"g-{dim}-{dtype}-{n}", seed, dims, inputs)


def growth_repro(spec_id: str, dim: str, dtype: str, seed: int) -> str:
    """The command that re-runs one sweep: a growth finding is about a curve, not one case."""
    return f"gpu-gate repro {shlex.quote(spec_id)} --check equivalence --growth {dim}:{dtype} --seed {seed}"


def sweep(runner: Any, spec: Spec, job: Any, budget: int, bad_dtypes: frozenset[str], deadline: float,
          *, seed: int | None = None) -> dict[str, Any] | None:
    """Sweep every reduction dim x dtype. Returns ``{"table": ..., "findings": [...]}``: the
    table is one curve (``dim, dtype, rows, slope_candidate, slope_baseline, flagged``), the
    flagged one first, with every curve under ``curves`` when there are several."""
    import time

    seed = job.seed if seed is None else seed
    top = int(job.options.get("max_reduction") or MAX_REDUCTION)
    reductions = [d for d, dim in spec.dims.items() if dim.reduction]
    dtypes = [d for d in spec.dtype_choices() if d not in bad_dtypes and d != "float64"]
    if job.options.get("dtypes"):
        dtypes = [d for d in dtypes if d in job.options["dtypes"]]
    only = job.options.get("growth_only")  # "dim:dtype", from `gpu-gate repro --growth`
    if only:
        want_dim, _, want_dtype = str(only).partition(":")
        reductions = [d for d in reductions if d == want_dim]
        dtypes = [d for d in dtypes if not want_dtype or d == want_dtype]
    if not reductions or not dtypes:
        return None
    table: list[dict[str, Any]] = []
    findings: list[Finding] = []
    for dim in reductions:
        for dtype in dtypes:
            sizes, cand, base = [], [], []
            last: Case | None = None
            for n in growth_sizes(spec.dims[dim], top):
                case = _case(spec, dim, n, dtype, seed=(seed * 7 + n) % (2**31))
                if case_bytes(spec, case.dims, case.inputs) > budget or time.monotonic() > deadline:
                    break
                r = runner.run(case, sensitivity=False)
                if r.refused or not r.comparisons:
                    continue
                findings += [f for f in r.findings if f.severity is Severity.ERROR]
                worst = max(r.comparisons, key=lambda c: c.error)
                sizes.append(n)
                last = case
                cand.append(worst.error)
                base.append(worst.baseline_error)
            if len(sizes) < 3:
                continue
            # errors far below the dtype's epsilon are exact results: clamp them so an exact
            # result at short lengths does not fake a steep slope
            eps = EPS.get(dtype, EPS["float32"]) / 16
            sc = log_slope(sizes, [max(c, eps) for c in cand])
            sb = log_slope(sizes, [max(b, eps) for b in base])
            floor = floor_for(dtype)
            flagged = sc - sb > SLOPE_MARGIN and cand[-1] > base[-1] and cand[-1] > floor
            table.append({"dim": dim, "dtype": dtype, "slope_candidate": round(sc, 3),
                          "slope_baseline": round(sb, 3), "flagged": flagged,
                          "rows": [{"size": s, "candidate": c, "baseline": b} for s, c, b in zip(sizes, cand, base)]})
            if flagged:
                rows = ", ".join(f"{s}: {c:.2g} vs {b:.2g}" for s, c, b in zip(sizes, cand, base))
                assert last is not None
                findings.append(Finding(
                    check="equivalence", kind="error-growth", spec=job.spec.id, case=last.id,
                    repro=growth_repro(job.spec.id, dim, dtype, seed),
                    message=f"error grows materially faster than torch's along reduction dim {dim!r} in {dtype}: "
                            f"slope {sc:.2f} vs {sb:.2f} (log-log); at {sizes[-1]} the error is "
                            f"{cand[-1] / max(base[-1], 1e-300):.3g}x torch's. Errors by length (candidate vs torch): "
                            f"{rows}. Likely a low-precision accumulator.",
                    details={"dim": dim, "dtype": dtype, "token": last.token(), "case": last.describe(),
                             "slope_candidate": sc, "slope_baseline": sb}))
    if not table:
        return None
    dedup: dict[tuple[str, str], Finding] = {}
    for f in findings:
        dedup.setdefault((f.kind, str(f.details.get("output", ""))), f)
    table.sort(key=lambda t: not t["flagged"])  # the reporter draws the first curve: the flagged one
    return {"table": table[0] if len(table) == 1 else {**table[0], "curves": table},
            "findings": list(dedup.values())}
