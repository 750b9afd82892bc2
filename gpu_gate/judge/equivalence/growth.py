"""Error growth along a reduction dim: sweep its length and compare how fast the
candidate's error grows with how fast torch's own dtype-precision error grows.

A bf16 accumulator is *more* accurate than torch's bf16 sum at short lengths and
hundreds of times worse at 2**18 (FACTS.md): single cases miss it; the slope does not.
"""
from __future__ import annotations

import math
import shlex
from typing import TYPE_CHECKING, Any

from ...findings import Finding, Severity
from ...spec import Index, Spec
from ...protocol.cases import MAX_REDUCTION, Case, InputChoice, case_bytes, growth_sizes, log_slope
from .compare import EPS, floor_for
from .engine import REGRESSION_FLOOR_EPS, marked
from .growth_base import finding as against_base
from .growth_base import grows_faster

if TYPE_CHECKING:
    from collections.abc import Sequence

    from .engine import CaseRunner

SLOPE_MARGIN = 0.3
JUMP_RATIO = 1.5  # candidate vs torch at the longest length (both rules)
JUMP_FACTOR = 1.5  # ... and against its median ratio at the shorter lengths
GROWTH_DRAWS = 4  # draws pooled at the longest length when the comparison with the base's code is close
POOL_UNTIL = 4.0  # ... close: the head's error there within this factor of the base's (and above it)
SIGNS = {"positive": "uniform_pos", "signed": "normal"}


def _small(spec: Spec, name: str) -> int:
    dim = spec.dims[name]
    for n in (4, 3, 2, 1, dim.lo):
        if dim.allows(n):
            return n
    return dim.lo


def _case(spec: Spec, dim: str, n: int, dtype: str, seed: int, sign: str = "positive") -> Case:
    dims = {d: (n if d == dim else _small(spec, d)) for d in spec.dims}
    inputs = {}
    for name, inp in spec.inputs.items():
        if isinstance(inp, Index):
            inputs[name] = InputChoice(inp.dtype, "uniform", "contiguous")
        else:
            own = dtype if (inp.dtypes and dtype in inp.dtypes) or (inp.dtype or "").startswith("like:") else \
                (inp.dtype or (inp.dtypes or ("float32",))[0])
            inputs[name] = InputChoice(own, _dist(inp.dists, sign), "contiguous")
    suffix = "" if sign == "positive" else f"-{sign}"
    return Case(f"g-{dim}-{dtype}-{n}{suffix}", seed, dims, inputs)


def _dist(allowed: Sequence[str] | None, sign: str) -> str:
    want = SIGNS[sign]
    return want if not allowed or want in allowed else allowed[0]


def signs(spec: Spec) -> list[str]:
    """The data signs swept: positive values (a sum that only grows: an accumulator's rounding
    shows most) and signed ones (cancellation), where the spec's distributions allow each."""
    floats = spec.float_inputs().values()
    return [sign for sign, dist in SIGNS.items() if all(not t.dists or dist in t.dists for t in floats)] \
        or ["positive"]


def jumped(cand: list[float], base: list[float]) -> bool:
    """The candidate's error relative to torch's jumps at the longest length: at least
    JUMP_RATIO times torch's there, and JUMP_FACTOR times its median ratio at the shorter
    lengths (a kernel that switches to a bad code path beyond a size threshold, or a bf16
    accumulation that stays under the slope threshold)."""
    ratios = [c / max(b, 1e-300) for c, b in zip(cand, base)]
    earlier = sorted(ratios[:-1])
    median = earlier[len(earlier) // 2]
    return ratios[-1] >= JUMP_RATIO and ratios[-1] >= JUMP_FACTOR * median


def growth_repro(spec_id: str, dim: str, dtype: str, seed: int) -> str:
    """The command that re-runs one sweep: a growth finding is about a curve, not one case."""
    return f"gpu-gate repro {shlex.quote(spec_id)} --check equivalence --growth {dim}:{dtype} --seed {seed}"


def sweep(runner: CaseRunner, spec: Spec, job: Any, budget: int, bad_dtypes: frozenset[str], deadline: float,
          *, seed: int | None = None) -> dict[str, object] | None:
    """Sweep every reduction dim x dtype. Returns ``{"table": ..., "findings": [...]}``: the
    table is one curve (``dim, dtype, rows, slope_candidate, slope_baseline, flagged``), the
    flagged one first, with every curve under ``curves`` when there are several."""
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
    table: list[dict[str, object]] = []
    findings: list[Finding] = []
    for dim, dtype, sign in [(d, t, g) for d in reductions for t in dtypes for g in signs(spec)]:
        curve = _measure(runner, spec, dim, dtype, sign, top, budget, deadline, seed, findings)
        if curve is None:
            continue
        sizes, cand, base, last, at_base, draws = curve
        sc, sb, sloped, jump = _flagged(sizes, cand, base, dtype)
        rows: list[dict[str, object]] = [{"size": s, "candidate": c, "baseline": b}
                                         for s, c, b in zip(sizes, cand, base)]
        if at_base is not None:  # differential runs: the base's code on the same lengths
            for r, e in zip(rows, at_base):
                r["base"] = e
        table.append({"dim": dim, "dtype": dtype, "data": sign, "slope_candidate": round(sc, 3),
                      "slope_baseline": round(sb, 3), "flagged": sloped or jump, "jump": jump, "rows": rows})
        if draws > 1:
            table[-1]["draws_at_longest"] = draws
        if sloped or jump:
            f = _growth_finding(job, dim, dtype, sign, seed, last, sizes, cand, base, sc, sb, sloped)
            if at_base is not None:
                _, _, base_sloped, base_jump = _flagged(sizes, at_base, base, dtype)
                f = marked(f, "pre-existing" if base_sloped or base_jump else "new")
            findings.append(f)
        elif at_base is not None:
            # within torch's growth: still a regression where it grows faster than the base's code
            b_sloped, b_jump, sh, sbase = grows_faster(sizes, cand, at_base, dtype)
            table[-1].update({"slope_base": round(sbase, 3), "flagged_against_base": b_sloped or b_jump})
            if b_sloped or b_jump:
                table[-1]["flagged"] = True
                findings.append(against_base(job, dim, dtype, sign, seed, last, sizes, cand, at_base, base, b_sloped,
                                             sh, sbase, growth_repro(job.spec.id, dim, dtype, seed), draws))
    if not table:
        return None
    dedup: dict[tuple[str, str], Finding] = {}
    for f in findings:
        dedup.setdefault((f.kind, str(f.details.get("output", ""))), f)
    table.sort(key=lambda t: not t["flagged"])  # the reporter draws the first curve: the flagged one
    return {"table": table[0] if len(table) == 1 else {**table[0], "curves": table},
            "findings": list(dedup.values())}


THRESHOLD_LONG = 1 << 15  # the reduction length held while another dim is swept (a long one that fits)
THRESHOLD_STEP = 4  # the swept dim grows by this factor from one case to the next
THRESHOLD_MIN_LONG = 4096  # the shortest reduction length the sweep still calls long


def threshold_sweep(runner: CaseRunner, spec: Spec, job: Any, budget: int, bad_dtypes: frozenset[str], deadline: float,
                    *, seed: int | None = None) -> list[Finding]:
    """Kernels switch code paths by size ("split the reduction when there are many rows", "another
    block size above 256 columns"): every other dim is swept from its smallest size up by factors
    of 4, each time with the longest reduction (4096 .. 2^15) that fits the budget beside it, so
    that a path taken only past a threshold is run with the long reduction it is there for. Each
    case is judged like any other; returns their failures."""
    import time

    seed = job.seed if seed is None else seed
    reductions = [d for d, dim in spec.dims.items() if dim.reduction]
    others = [d for d, dim in spec.dims.items() if not dim.reduction]
    dtypes = [d for d in spec.dtype_choices() if d not in bad_dtypes and d != "float64"]
    if job.options.get("dtypes"):
        dtypes = [d for d in dtypes if d in job.options["dtypes"]]
    if not reductions or not others or not dtypes:
        return []
    top = int(job.options.get("max_reduction") or MAX_REDUCTION)
    findings: list[Finding] = []
    for rdim in reductions:
        lengths = [n for n in growth_sizes(spec.dims[rdim], min(top, THRESHOLD_LONG)) if n >= THRESHOLD_MIN_LONG]
        for odim in others:
            dim = spec.dims[odim]
            n = max(1, dim.lo)
            while n <= dim.hi:
                if time.monotonic() > deadline:
                    return _dedup(findings)
                if not dim.allows(n):
                    n *= THRESHOLD_STEP
                    continue
                # the longest reduction that fits beside this size: the plane of (size, length) is
                # covered along its budget edge, where both are as large as they can be together
                fit = None
                for long in reversed(lengths):
                    case = _case(spec, rdim, long, dtypes[0], seed=(seed * 13 + n) % (2**31), sign="signed")
                    case = Case(f"t-{rdim}-{odim}-{n}", case.seed, {**case.dims, odim: n}, case.inputs)
                    if case_bytes(spec, case.dims, case.inputs) <= budget:
                        fit = case
                        break
                if fit is None:
                    break
                r = runner.run(fit, sensitivity=False)
                findings += [f for f in r.findings if f.severity is Severity.ERROR]
                n *= THRESHOLD_STEP
    return _dedup(findings)


def _dedup(findings: list[Finding]) -> list[Finding]:
    seen: dict[tuple[str, str, str], Finding] = {}
    for f in findings:
        seen.setdefault((f.kind, str(f.details.get("output", "")), str(f.details.get("change", ""))), f)
    return list(seen.values())


def _flagged(sizes: list[int], cand: list[float], base: list[float], dtype: str) -> tuple[float, float, bool, bool]:
    """(slope of ``cand``, slope of torch's, sloped, jumped) for one curve."""
    # errors far below the dtype's epsilon are exact results: clamp them so an exact
    # result at short lengths does not fake a steep slope, or a jump
    eps = EPS.get(dtype, EPS["float32"]) / 16
    cand_c, base_c = [max(c, eps) for c in cand], [max(b, eps) for b in base]
    sc, sb = log_slope(sizes, cand_c), log_slope(sizes, base_c)
    floor = floor_for(dtype)
    # both rules want the candidate clearly worse than torch at the longest length: a
    # ratio near 1 there is the noise of one sample, whatever the slope of three points says
    sloped = sc - sb > SLOPE_MARGIN and cand[-1] >= JUMP_RATIO * base[-1] and cand[-1] > floor
    jump = jumped(cand_c, base_c) and cand[-1] > floor
    return sc, sb, sloped, jump


def _growth_finding(job: Any, dim: str, dtype: str, sign: str, seed: int, last: Case, sizes: list[int],
                    cand: list[float], base: list[float], sc: float, sb: float, sloped: bool) -> Finding:
    rows = ", ".join(f"{s}: {c:.2g} vs {b:.2g}" for s, c, b in zip(sizes, cand, base))
    ratio = cand[-1] / max(base[-1], 1e-300)
    what = (f"error grows materially faster than torch's along reduction dim {dim!r} in {dtype} on {sign} data: "
            f"slope {sc:.2f} vs {sb:.2f} (log-log)" if sloped else
            f"error jumps at the longest lengths of reduction dim {dim!r} in {dtype} on {sign} data "
            f"(slope {sc:.2f} vs {sb:.2f})")
    return Finding(
        check="equivalence", kind="error-growth", spec=job.spec.id, case=last.id,
        repro=growth_repro(job.spec.id, dim, dtype, seed),
        message=f"{what}; at {sizes[-1]} the error is {ratio:.3g}x torch's. Errors by length (candidate vs torch): "
                f"{rows}. Likely a low-precision accumulator, or a code path taken only at long lengths.",
        details={"dim": dim, "dtype": dtype, "data": sign, "token": last.token(), "case": last.describe(),
                 "slope_candidate": sc, "slope_baseline": sb, "jump": not sloped})


def _measure(runner: CaseRunner, spec: Spec, dim: str, dtype: str, sign: str, top: int, budget: int, deadline: float,
             seed: int, findings: list[Finding]
             ) -> tuple[list[int], list[float], list[float], Case, list[float] | None, int] | None:
    """One curve: (lengths, candidate errors, baseline errors, the longest case, the base's code's
    errors or None, the draws pooled at the longest length), or None when fewer than three lengths
    ran. Errors of single cases go to ``findings``."""
    import time

    sizes: list[int] = []
    cand: list[float] = []
    base: list[float] = []
    at_base: list[float] | None = []
    last: Case | None = None
    output = ""
    for n in growth_sizes(spec.dims[dim], top):
        case = _case(spec, dim, n, dtype, seed=(seed * 7 + n) % (2**31), sign=sign)
        if case_bytes(spec, case.dims, case.inputs) > budget or time.monotonic() > deadline:
            break
        r = runner.run(case, sensitivity=False)
        if r.refused or r.unsupported or not r.comparisons:
            continue
        findings += [f for f in r.findings if f.severity is Severity.ERROR]
        worst = max(r.comparisons, key=lambda c: c.error)
        output = worst.name
        sizes.append(n)
        last = case
        cand.append(worst.error)
        base.append(worst.baseline_error)
        same = [c for c in r.base_comparisons or () if c.name == worst.name]
        at_base = at_base + [same[0].error] if at_base is not None and same else None
    if len(sizes) < 3 or last is None:
        return None
    draws = 1
    if at_base is not None and _undecided(cand[-1], at_base[-1], dtype):
        first = (cand[-1], base[-1], at_base[-1])
        cand[-1], base[-1], at_base[-1], draws = _pooled(runner, spec, dim, dtype, sign, sizes[-1], seed, budget,
                                                         deadline, output, first, findings)
    return sizes, cand, base, last, at_base, draws


def _undecided(head: float, base: float, dtype: str) -> bool:
    """Whether one draw at the longest length leaves the comparison with the base's code open: the
    head is less accurate there than the base (after the rounding floor), by less than the margin
    that no draw's noise reaches."""
    floor = REGRESSION_FLOOR_EPS * EPS.get(dtype, EPS["float32"])
    ratio = max(head, floor) / max(base, floor)
    return 1.0 < ratio < POOL_UNTIL


def _pooled(runner: CaseRunner, spec: Spec, dim: str, dtype: str, sign: str, n: int, seed: int, budget: int,
            deadline: float, output: str, first: tuple[float, float, float], findings: list[Finding]
            ) -> tuple[float, float, float, int]:
    """The longest length's errors pooled over up to GROWTH_DRAWS draws of fresh inputs (the head's,
    torch's and the base's, of the output the first draw found worst), and the number of draws: the
    normwise error of all the draws' outputs together, the root mean square of each draw's. One draw
    of a few rows decides a ratio of 1.5 by chance (a weak regression's ratio to the base spreads from
    1.0 to 2.2 over seeds at 2^16 of 16 rows); the pool narrows it."""
    import time

    sums = [x * x for x in first]
    drawn = 1
    for k in range(1, GROWTH_DRAWS):
        if time.monotonic() > deadline:
            break
        case = _case(spec, dim, n, dtype, seed=(seed * 7 + n + 7919 * k) % (2**31), sign=sign)
        case = Case(f"{case.id}-draw{k}", case.seed, case.dims, case.inputs)
        if case_bytes(spec, case.dims, case.inputs) > budget:
            break
        r = runner.run(case, sensitivity=False)
        if r.refused or r.unsupported or not r.comparisons:
            continue
        findings += [f for f in r.findings if f.severity is Severity.ERROR]
        mine = [c for c in r.comparisons if c.name == output]
        same = [c for c in r.base_comparisons or () if c.name == output]
        if not mine or not same:
            continue
        worst = mine[0]
        for i, x in enumerate((worst.error, worst.baseline_error, same[0].error)):
            sums[i] += x * x
        drawn += 1
    head, torch_error, base = (math.sqrt(x / drawn) for x in sums)
    return head, torch_error, base, drawn
