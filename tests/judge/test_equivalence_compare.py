"""The comparison rule: baseline-relative, normwise and worst element, with near-zero
handling, out-of-range elements, NaN/Inf, constant outputs and a fixed atol/rtol rule."""
from __future__ import annotations

import torch

from gpu_gate.judge.equivalence.compare import Rule, agree, compare

RULE = Rule(baseline_factor=2.0)


def _gen(seed: int = 0) -> torch.Generator:
    g = torch.Generator()
    g.manual_seed(seed)
    return g


def _case(n: int = 1000, dtype: torch.dtype = torch.bfloat16) -> tuple[torch.Tensor, torch.Tensor]:
    ref = torch.randn(n, generator=_gen(), dtype=torch.float64)
    return ref, ref.to(dtype)  # torch's dtype result: the reference rounded once


def test_as_accurate_as_torch_passes() -> None:
    ref, base = _case()
    c = compare("out", base.clone(), ref, base, RULE)
    assert c.ok and c.kind == "ok"
    assert c.error == c.baseline_error > 0


def test_one_element_far_off_fails_on_the_worst_element_not_the_norm() -> None:
    ref, base = _case(4096)
    i = int(ref.abs().argmax())
    cand = base.clone()
    cand[i] = (ref[i] * 1.05).to(torch.bfloat16)  # 5% off in one of 4096 elements
    c = compare("out", cand, ref, base, RULE)
    assert not c.ok and c.kind == "mismatch"
    assert c.details["measures"] == ["worst element"]
    assert c.details["mismatched"] == 1
    assert "Mismatched elements: 1 / 4096 (0.0%)" in c.message
    assert f"at index ({i},)" in c.message


def test_a_uniformly_worse_result_fails_normwise() -> None:
    ref, base = _case(4096, torch.float32)
    noise = torch.randn(4096, generator=_gen(1), dtype=torch.float64) * 1e-5
    cand = (ref * (1 + noise)).to(torch.float32)
    c = compare("out", cand, ref, base, RULE)
    assert not c.ok and "normwise" in c.details["measures"]
    assert "Normwise relative error" in c.message and "ratio" in c.message


def test_near_zero_reference_elements_are_judged_absolutely() -> None:
    ref = torch.tensor([1.0, -1.0, 1e-12, 0.0, 2.0], dtype=torch.float64)
    base = ref.to(torch.float32)
    cand = base.clone()
    cand[2] = 3e-9  # huge relative error, negligible against the output's scale
    cand[3] = -2e-8
    assert compare("out", cand, ref, base, RULE).ok


def test_nan_where_the_reference_is_finite_fails() -> None:
    ref, base = _case(100, torch.float32)
    cand = base.clone()
    cand[42] = float("nan")
    c = compare("out", cand, ref, base, RULE)
    assert not c.ok and c.kind == "nan"
    assert "1 / 100 elements are NaN/Inf where the reference is finite (first at index (42,)" in c.message


def test_nan_where_the_reference_is_nan_is_accepted() -> None:
    ref = torch.tensor([float("nan"), 1.0, 2.0], dtype=torch.float64)
    base = ref.to(torch.float16)
    assert compare("out", base.clone(), ref, base, RULE).ok


def test_inf_where_torch_itself_overflows_the_dtype_is_not_judged() -> None:
    ref = torch.tensor([70000.0, 1.0, 2.0], dtype=torch.float64)  # beyond float16's range
    base = ref.to(torch.float16)
    assert torch.isinf(base[0])
    c = compare("out", base.clone(), ref, base, RULE)
    assert c.ok and c.details["out_of_range"] == 1


def test_infinities_of_the_reference_must_be_matched() -> None:
    ref = torch.tensor([float("-inf"), 1.0, 2.0], dtype=torch.float64)
    base = ref.to(torch.float32)
    cand = base.clone()
    cand[0] = 0.0
    c = compare("out", cand, ref, base, RULE)
    assert not c.ok and c.kind == "nonfinite"


def test_all_zero_output_fails_as_constant() -> None:
    ref, base = _case(64, torch.float32)
    c = compare("out", torch.zeros(64), ref, base, RULE)
    assert not c.ok and c.kind == "constant-output"
    assert "every element is zero" in c.message


def test_constant_output_is_fine_where_the_reference_varies_only_within_rounding() -> None:
    ref = torch.tensor([1008.86, 1009.2, 1009.9], dtype=torch.float64)
    base = ref.to(torch.bfloat16)  # 1008, 1008, 1008: bf16 cannot tell them apart
    assert compare("out", torch.full((3,), 1008.0, dtype=torch.bfloat16), ref, base, RULE).ok


def test_shape_and_dtype_and_type_mismatches() -> None:
    ref, base = _case(8, torch.float32)
    assert compare("out", base[:4], ref, base, RULE).kind == "shape"
    assert compare("out", base.double(), ref, base, RULE).kind == "dtype"
    assert compare("out", 3.0, ref, base, RULE).kind == "type"


def test_a_wider_output_dtype_than_torchs_is_a_dtype_error_that_says_how_a_spec_states_it() -> None:
    """A float32 loss from bfloat16 logits (Hugging Face's loss upcasts; Liger-Kernel's and unsloth's now
    return float32): the spec states the output's dtype through its reference; the message says how."""
    ref, base = _case(8, torch.bfloat16)
    wide = compare("out", base.float(), ref, base, RULE)
    assert wide.kind == "dtype" and not wide.ok and "gg.upcast" in wide.message
    narrow = compare("out", base.to(torch.float16), ref, base, RULE)
    assert narrow.kind == "dtype" and "gg.upcast" not in narrow.message


def test_fixed_atol_rtol_rule() -> None:
    ref, base = _case(100, torch.float32)
    cand = (ref + 1e-3).to(torch.float32)
    assert not compare("out", cand, ref, base, RULE).ok
    assert compare("out", cand, ref, base, Rule(atol=2e-3, rtol=0.0)).ok
    c = compare("out", cand, ref, base, Rule(atol=1e-4, rtol=1e-4))
    assert not c.ok and "atol 0.0001 + rtol 0.0001 x |reference|" in c.message


def test_conditioning_widens_the_baseline_for_ill_conditioned_inputs() -> None:
    ref = torch.linspace(-1, 1, 257, dtype=torch.float64)
    base = ref.to(torch.float32)
    cand = (ref * (1 + 3e-5)).to(torch.float32)  # an fp32 algorithm on a badly conditioned case
    assert not compare("out", cand, ref, base, RULE).ok
    shifted = ref * (1 + 4e-5)  # how far the reference moves when its inputs are rounded
    assert compare("out", cand, ref, base, RULE, perturbed=shifted).ok


def test_agree_within_tolerance_and_bitwise() -> None:
    ref, base = _case(256, torch.float32)
    a = base.clone()
    b = base.clone()
    b[3] = torch.nextafter(b[3], torch.tensor(10.0))
    assert agree("out", a, b, bitwise=False, ref=ref, base=base, rule=RULE) is None
    why = agree("out", a, b, bitwise=True, ref=ref, base=base, rule=RULE)
    assert why is not None and "deterministic=True" in why and "(1 elements)" in why
    far = a.clone()
    far[0] += 1.0
    why = agree("out", a, far, bitwise=False, ref=ref, base=base, rule=RULE)
    assert why is not None and "depends on something besides the inputs" in why
