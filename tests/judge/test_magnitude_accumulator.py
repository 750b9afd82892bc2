"""The normal distribution's extreme scale leaves room for the accumulator a correct kernel sums in.

Seen on the corpus's row sum of bfloat16 rows accumulated in float32 (correct): at the scale where the
float64 reference and torch's own bfloat16 sum were finite, 2**18 terms near bfloat16's maximum
overflowed the float32 running sum, and the correct kernel was reported for NaN/Inf output. Seen on the
GPU corpus's layer norm in float32 (correct, two passes), whose spec declares no reduction: at 2**124
its centred values' squares overflowed float32, and every output was NaN."""
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
    # the squares of 2**18 terms of up to 8 sigmas at that scale stay below float32's maximum, with headroom
    assert (1 << 18) * (8 * 2.0 ** cap) ** 2 < 3.4e38 / 4
    # and the room is what the reduction needs, not a unit scale: bfloat16's range past float16's is exercised
    assert cap > 40


def test_a_wider_declared_accumulator_and_a_shorter_reduction_allow_more() -> None:
    short = accumulator_cap(_case(16), _spec(), ["x"])
    long = accumulator_cap(_case(1 << 18), _spec(), ["x"])
    wide = accumulator_cap(_case(1 << 18), _spec(accumulate="float64"), ["x"])
    assert short is not None and long is not None and wide is not None
    assert short - long == 7 and wide > 450 > long


def test_without_a_declared_reduction_every_element_of_the_largest_input_may_be_summed() -> None:
    """A layer norm whose spec declares no reduction still sums (and squares) a row: the cap counts
    every element of the largest input, so it is at most the declared reduction's."""
    undeclared = accumulator_cap(_case(1 << 18), _spec(reduction=False), ["x"])
    declared = accumulator_cap(_case(1 << 18), _spec(), ["x"])
    assert undeclared is not None and declared is not None and undeclared <= declared
    assert 3 * (1 << 18) * (8 * 2.0 ** undeclared) ** 2 < 3.4e38 / 4
    assert accumulator_cap(_case(1 << 18), None, ["x"]) is None
    assert math.isfinite(float(accumulator_cap(_case(2), _spec(), ["x"]) or 0))


def test_a_float32_layer_norm_without_a_declared_reduction_is_not_overflowed() -> None:
    """The GPU corpus's case: 33 rows of 2048 float32 values; at the capped scale a correct two-pass
    layer norm in float32 stays finite."""
    import torch

    @gg.spec(dims={"rows": gg.Dim(1, 64), "cols": gg.Dim(1, 4096)},
             inputs={"x": gg.Tensor(("rows", "cols"), dtypes=["float32"])},
             reference=lambda x: torch.nn.functional.layer_norm(x.double(), x.shape[-1:]).to(x.dtype))
    def ln(x):  # type: ignore[no-untyped-def]
        return x
    case = Case(id="c", seed=0, dims={"rows": 33, "cols": 2048},
                inputs={"x": InputChoice(dtype="float32", layout="contiguous", dist="normal", param=-1.0)})
    cap = accumulator_cap(case, ln, ["x"])
    assert cap is not None and cap > 30
    x = torch.randn(33, 2048, generator=torch.Generator().manual_seed(0)) * 2.0 ** cap
    mean = x.sum(-1, keepdim=True) / 2048
    var = ((x - mean) ** 2).sum(-1, keepdim=True) / 2048
    assert torch.isfinite((x - mean) * torch.rsqrt(var + 1e-5)).all()
    x = x * 2.0 ** (124 - cap)  # the scale the sweep took before the cap
    var = ((x - x.sum(-1, keepdim=True) / 2048) ** 2).sum(-1, keepdim=True)
    assert not torch.isfinite(var).all()
