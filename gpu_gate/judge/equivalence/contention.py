"""Cases built to make a kernel's programs contend for what they share in production.

A kernel that accumulates partial rows under a lock per group, or scatters into rows picked by
an index, races only when several programs hit the same lock or row at once: many more rows
than the kernel has locks or partial buffers, wide rows (long critical sections), and hot
indices. The fuzzed cases rarely combine those, and the equivalence check's per-case memory cap
keeps them small. These cases do, within a budget that on a GPU follows its free memory:

- ``rows``: the reduction dims at a common model width (4096, or their bound if smaller), every
  other dim as large as its bound and the budget allow, so thousands of programs share each lock;
- ``wide``: the reduction dims at their upper bound, the other dims as large as the budget allows;

with contiguous float inputs of the spec's first dtype, normal values, and Zipf-skewed indices
(hot ids collide in scatters). Both are reproducible: their tokens replay them.
"""
from __future__ import annotations


from ...spec import Index, Spec
from ...protocol.cases import MAX_REDUCTION, Case, InputChoice, _fit_budget, _shape, applicable

COMMON_WIDTH = 4096
GIB = 1 << 30


def gpu_budget(free_bytes: int | None, cap_gib: float) -> int:
    """Bytes one contention case may take: the policy's cap, and at most a third of what the
    GPU has free (the reference in float64 and the comparisons need the rest)."""
    cap = int(cap_gib * GIB)
    return cap if free_bytes is None else max(64 << 20, min(cap, free_bytes // 3))


def contention_cases(spec: Spec, seed: int, dtype: str, budget: int, max_reduction: int = MAX_REDUCTION) -> list[Case]:
    reductions = [d for d, dim in spec.dims.items() if dim.reduction]
    out = []
    for n, kind in enumerate(("rows", "wide")):
        dims: dict[str, int] = {}
        for name, dim in spec.dims.items():
            top = min(dim.hi, max_reduction) if dim.reduction else dim.hi
            if dim.values is not None:
                top = max(v for v in dim.values if v <= top) if any(v <= top for v in dim.values) else dim.lo
            if kind == "rows" and dim.reduction and dim.allows(COMMON_WIDTH) and COMMON_WIDTH <= top:
                top = COMMON_WIDTH
            dims[name] = top
        inputs = {name: InputChoice(inp.dtype, "zipf", "contiguous") if isinstance(inp, Index)
                  else InputChoice(dtype, "normal", "contiguous") for name, inp in spec.inputs.items()}
        # The rows' width is what the case is about: the other dims give way to the budget first.
        keep = reductions[0] if reductions else _row_dim(spec)
        dims = _fit_budget(spec, dims, inputs, budget, keep)
        inputs = {k: InputChoice(c.dtype, c.dist, applicable(c.layout, _shape(spec.inputs[k].shape, dims)), c.param)
                  for k, c in inputs.items()}
        case_seed = (seed * 1_000_003 + 99_991 * (n + 1)) % (2**31)
        out.append(Case(f"k{n}{kind}", case_seed, dims, inputs))
    return _distinct(out)


def _row_dim(spec: Spec) -> str | None:
    others = [d for d, dim in spec.dims.items() if not dim.reduction]
    return max(others, key=lambda d: spec.dims[d].hi) if others else None


def _distinct(cases: list[Case]) -> list[Case]:
    seen: set[str] = set()
    out = []
    for c in cases:
        key = repr(sorted(c.dims.items()))
        if key not in seen:
            seen.add(key)
            out.append(c)
    return out
