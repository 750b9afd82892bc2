"""The largest magnitude a case's normal inputs take: the largest power of two the dtype holds at
which the reference does not overflow.

The first fuzzed cases meet each distribution at its extreme (:mod:`gpu_gate.protocol.early`); for
the normal distribution that is its scale, and where it overflows depends on the reference. So the
judge asks the reference worker, before the case runs: on the case's own sizes and values, the
float64 reference must stay finite and within the output dtype's range, and torch's result in the
kernel's dtype finite where the float64 one is (an overflow inside torch's own low-precision path
would leave nothing to judge the kernel against). The scale found is written into the case, so its
token replays it exactly.
"""
from __future__ import annotations

import dataclasses
import math
from typing import Any

from ...protocol.cases import Case
from ...protocol.early import MAGNITUDE
from ...protocol.rounding import accumulation_dtype
from ...spec import Spec
from ..workers import Reference, SpecBroken

HEADROOM_BITS = 3  # the largest scale tried leaves this many powers of two below the dtype's maximum


def unsettled(case: Case) -> bool:
    return any(c.dist == "normal" and c.param == MAGNITUDE for c in case.inputs.values())


def settle(case: Case, reference: Reference, spec: Spec | None = None) -> Case:
    """``case`` with its unsettled normal inputs at the largest scale that passes (unit scale where
    none larger does), and, with ``spec``, at which no sum of products of its values a correct kernel
    may compute overflows the precision it accumulates in (:func:`accumulator_cap`)."""
    import torch

    names = [k for k, c in case.inputs.items() if c.dist == "normal" and c.param == MAGNITUDE]
    if not names:
        return case
    top = min(int(math.log2(torch.finfo(getattr(torch, case.inputs[k].dtype)).max)) for k in names) - HEADROOM_BITS
    cap = accumulator_cap(case, spec, names)
    top = top if cap is None else min(top, cap)
    lo, hi = 0, max(0, top)  # scale 2**lo passes (unit scale is assumed to); find the largest that does
    if hi > 0 and _passes(_scaled(case, names, 2.0 ** hi), reference):
        lo = hi
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if _passes(_scaled(case, names, 2.0 ** mid), reference):
            lo = mid
        else:
            hi = mid
    return _scaled(case, names, 2.0 ** lo if lo > 0 else 0.0)


SAMPLE_BITS = 3  # a normal sample's largest magnitude, in powers of two of its scale (8 sigmas)


def accumulator_cap(case: Case, spec: Spec | None, names: list[str]) -> int | None:
    """The largest power of two of the scale at which a sum of products of two of the case's values
    (a square, a dot product, a variance), over as many terms as a kernel may reduce, stays within the
    range of the dtype a correct kernel accumulates in (``rounding.accumulation_dtype``).

    A float32 accumulator summing 2**18 bfloat16 values near bfloat16's maximum overflows, and a
    layer norm in float32 squares its centred values, so 2048 float32 values of 2**124 overflow it
    however correct it is; a finite float64 reference would call either a bug. The terms are the
    declared reductions' lengths, or, where the spec declares none, every element of the largest
    input (any axis may be the one reduced). The cap leaves float16's whole range to the sweep (a
    kernel that squares float16 values past 256 is still caught) and bfloat16's and float32's far past
    it. None without a spec."""
    import torch

    if spec is None:
        return None
    terms = math.prod(case.dims.get(d, 1) for d, dim in spec.dims.items() if dim.reduction)
    if terms <= 1:
        terms = max((math.prod(d if isinstance(d, int) else case.dims.get(d, 1) for d in t.shape)
                      for t in spec.inputs.values()
                      if hasattr(t, "shape")), default=1)
    caps = []
    for k in names:
        acc = getattr(torch, accumulation_dtype(spec.accumulate, case.inputs[k].dtype))
        room = int(math.log2(torch.finfo(acc).max)) - math.ceil(math.log2(max(terms, 1)))
        caps.append(room // 2 - SAMPLE_BITS - HEADROOM_BITS)
    return max(0, min(caps))


def _scaled(case: Case, names: list[str], scale: float) -> Case:
    inputs = {k: (dataclasses.replace(c, param=scale) if k in names else c) for k, c in case.inputs.items()}
    return dataclasses.replace(case, inputs=inputs)


def _passes(case: Case, reference: Reference) -> bool:
    import torch

    try:
        ref, base, _ = reference.truth_for(case, {})()
    except SpecBroken:
        return False  # the reference raised on these values: they are beyond what it defines
    for k, r in ref.items():
        b = base.get(k)
        if not isinstance(r, torch.Tensor) or not r.is_floating_point() or not r.numel():
            continue
        if not bool(torch.isfinite(r).all()):
            return False
        if isinstance(b, torch.Tensor) and b.is_floating_point():
            if float(r.abs().max()) > torch.finfo(b.dtype).max:
                return False
            if b.shape == r.shape and not bool(torch.isfinite(b).all()):
                return False
    return True


def settle_all(cases: list[Case], reference: Reference, spec: Spec | None = None
               ) -> tuple[list[Case], dict[str, Any]]:
    """Every unsettled case settled; and the scale each took (for the result)."""
    out, scales = [], {}
    for c in cases:
        if unsettled(c):
            c = settle(c, reference, spec)
            scales[c.id] = max((x.param for x in c.inputs.values() if x.dist == "normal"), default=0.0)
        out.append(c)
    return out, scales
