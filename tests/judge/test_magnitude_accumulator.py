"""The normal distribution's extreme scale leaves room for the accumulator a correct kernel sums in.

Seen on the corpus's row sum of bfloat16 rows accumulated in float32 (correct): at the scale where the
float64 reference and torch's own bfloat16 sum were finite, 2**18 terms near bfloat16's maximum
overflowed the float32 running sum, and the correct kernel was reported for NaN/Inf output."""
from __future__ import annotations

import math

import gpu_gate as gg
from gpu_gate.judge.equivalence.magnitude import accumulator_cap
from gpu_gate.protocol.cases import Case, InputChoice
from gpu_gate.spec import Spec


def _spec(accumulate: str | None = None, reduction: bool = True) -> Spec:
    @gg.spec(dims={"rows": gg.Dim(1, 8), "n": gg.Dim(1, 1 << 18, reduction=reduction)},
             inputs={"x": gg.Tensor(("rows", "n"), dtypes=["bfloat16"])}, reference=lambda x: x.sum(-1),
             accumulate=accumulate)
    def rowsum(x):  # type: ignore[no-untyped-def]
        return x.sum(-1)
    return rowsum  # type: ignore[no-any-return]


def _case(n: int) -> Case:
    return Case(id="c", seed=0, dims={"rows": 3, "n": n},
                inputs={"x": InputChoice(dtype="bfloat16", layout="contiguous", dist="normal", param=-1.0)})


def test_the_scale_leaves_room_for_every_order_of_summing_the_terms() -> None:
    cap = accumulator_cap(_case(1 << 18), _spec(), ["x"])
    assert cap is not None
    # 2**18 terms of up to 8 sigmas at that scale stay below float32's maximum, with headroom
    assert (1 << 18) * 8 * 2.0 ** cap < 3.4e38 / 4
    # and the room is what the reduction needs, not a unit scale: bfloat16's range is still exercised
    assert cap > 90


def test_a_wider_declared_accumulator_and_a_shorter_reduction_allow_more() -> None:
    short = accumulator_cap(_case(16), _spec(), ["x"])
    long = accumulator_cap(_case(1 << 18), _spec(), ["x"])
    wide = accumulator_cap(_case(1 << 18), _spec(accumulate="float64"), ["x"])
    assert short is not None and long is not None and wide is not None
    assert short - long == 14 and wide > 900 > long


def test_no_declared_reduction_means_no_cap() -> None:
    assert accumulator_cap(_case(1 << 18), _spec(reduction=False), ["x"]) is None
    assert accumulator_cap(_case(1 << 18), None, ["x"]) is None
    assert math.isfinite(float(accumulator_cap(_case(2), _spec(), ["x"]) or 0))
