"""The arithmetic the worker's interpreter adaptations use (gpu_gate.worker.interpreter_math), checked
against torch's own bfloat16 and float16 arithmetic and float64 math."""
from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from gpu_gate.worker import interpreter_math as m


def _bits(t: torch.Tensor) -> np.ndarray:
    return t.view(torch.int16).numpy().view(np.uint16)


def test_float32_rounds_to_bfloat16_as_torch_does() -> None:
    gen = torch.Generator().manual_seed(0)
    x = torch.cat([torch.randn(100_000, generator=gen) * 10.0 ** torch.randint(-30, 30, (100_000,), generator=gen),
                   torch.tensor([0.0, -0.0, 1.0 + 2 ** -8, 1.0 + 3 * 2 ** -8, 3.3895e38, -3.3895e38, float("inf"),
                                 -float("inf"), 1e-40, -1e-41])])  # ties both ways, overflow to inf, subnormals
    assert np.array_equal(m.f32_to_bf16(x.numpy()), _bits(x.to(torch.bfloat16)))


def test_nan_stays_nan_and_truncation_is_toward_zero() -> None:
    assert np.isnan(m.bf16_to_f32(m.f32_to_bf16(np.array([np.nan], np.float32)))).all()
    x = np.array([1.0 + 255 * 2 ** -15, -(1.0 + 255 * 2 ** -15)], np.float32)
    assert m.bf16_to_f32(m.f32_to_bf16(x, toward_zero=True)).tolist() == [1.0, -1.0]
    assert m.bf16_to_f32(m.f32_to_bf16(x)).tolist() == [1.0 + 2 ** -7, -(1.0 + 2 ** -7)]


def test_float64_rounds_once_to_bfloat16() -> None:
    # halfway between two bfloat16 values in float64, a hair above: a float32 in between would round
    # it to the tie, then to even (down); one rounding goes up
    lo = 1.0
    above_tie = lo + 2 ** -8 + 2 ** -40
    assert m.bf16_to_f32(m.to_bf16(np.array([above_tie]))).item() == lo + 2 ** -7


def test_tree_sum_rounds_every_partial_sum_as_torch_bfloat16_adds() -> None:
    gen = torch.Generator().manual_seed(1)
    x = torch.rand(3, 1000, generator=gen).to(torch.bfloat16)
    want = x.clone()
    while want.shape[-1] > 1:  # the same tree in torch's bfloat16 arithmetic
        if want.shape[-1] % 2:
            want = torch.cat([want, torch.zeros(3, 1, dtype=torch.bfloat16)], dim=-1)
        want = want[:, 0::2] + want[:, 1::2]
    got = m.tree_sum(m.bf16_to_f32(_bits(x)), axis=1, keepdims=False, dtype=np.uint16)
    assert np.array_equal(got, _bits(want[:, 0].contiguous()))
    exact = x.double().sum(-1)
    assert not torch.equal(want[:, 0].double(), exact)  # the rounding shows: a float32 sum would hide it


def test_float16_tree_sum_is_the_gpus_not_numpys() -> None:
    gen = torch.Generator().manual_seed(2)
    x = torch.rand(8, 3000, generator=gen).to(torch.float16)
    want = x.clone()
    while want.shape[-1] > 1:
        if want.shape[-1] % 2:
            want = torch.cat([want, torch.zeros(8, 1, dtype=torch.float16)], dim=-1)
        want = want[:, 0::2] + want[:, 1::2]
    got = m.tree_sum(x.numpy().astype(np.float32), axis=1, keepdims=True, dtype=np.float16)
    assert got.dtype == np.float16 and got.shape == (8, 1)
    assert np.array_equal(got[:, 0], want[:, 0].numpy())
    assert not np.array_equal(got[:, 0], np.sum(x.numpy(), axis=1))  # numpy accumulates float16 in float32


def test_running_sum_rounds_each_step() -> None:
    x = m.bf16_to_f32(m.f32_to_bf16(np.ones((300, 2), np.float32)))
    out = m.bf16_to_f32(m.running_sum(x, 0, np.uint16))
    assert out[-1].tolist() == [256.0, 256.0]  # 256 + 1 rounds back to 256 in bfloat16


@pytest.mark.parametrize(("symbol", "fn"), [("__nv_rsqrtf", lambda x: 1 / math.sqrt(x)), ("__nv_tanhf", math.tanh),
                                            ("__nv_erff", math.erf), ("__nv_expf", math.exp),
                                            ("__nv_fast_expf", math.exp), ("__nv_log1pf", math.log1p)])
def test_libdevice_functions_within_an_ulp_of_float64(symbol: str, fn) -> None:  # type: ignore[no-untyped-def]
    x = np.linspace(0.01, 4.0, 101, dtype=np.float32)
    got = m.libdevice_call(symbol, [x], np.dtype(np.float32))
    want = np.array([fn(float(v)) for v in x], np.float64)
    assert got.dtype == np.float32
    assert np.all(np.abs(got - want) <= np.spacing(np.abs(want).astype(np.float32)))


def test_libdevice_binary_and_predicates() -> None:
    x, y = np.array([2.0, 9.0], np.float32), np.array([0.5, 2.0], np.float32)
    got = m.libdevice_call("__nv_powf", [x, y], np.dtype(np.float32))
    assert got.tolist() == [np.float32(math.sqrt(2.0)), 81.0]
    assert m.libdevice_call("__nv_isnanf", [np.array([np.nan, 1.0], np.float32)], np.dtype(np.int32)).tolist() == [1, 0]


def test_an_unknown_libdevice_function_says_so() -> None:
    with pytest.raises(NotImplementedError, match="libdevice function __nv_j0f has no CPU implementation"):
        m.libdevice_call("__nv_j0f", [np.ones(2, np.float32)], np.dtype(np.float32))
