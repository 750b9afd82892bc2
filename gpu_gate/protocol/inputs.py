"""Build a case's tensors: values from the chosen distribution, placed in the chosen
layout inside a guarded buffer, on the candidate's device. Deterministic given the case."""
from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence
from typing import TYPE_CHECKING

from ..spec import Index, Spec, Tensor
from . import couplings
from .cases import Case, InputChoice
from .guard import Guarded, contiguous_stride, guarded_strided

if TYPE_CHECKING:
    import torch


@dataclasses.dataclass
class Materialized:
    case: Case
    tensors: dict[str, torch.Tensor]  # what the candidate receives (strided, guarded views)
    guarded: dict[str, Guarded]
    snapshots: dict[str, torch.Tensor]  # bitwise copies, to prove the inputs were not written


def torch_dtype(name: str) -> torch.dtype:
    import torch

    dtype: torch.dtype = getattr(torch, name)
    return dtype


def _float_values(choice: InputChoice, shape: tuple[int, ...], gen: torch.Generator, device: torch.device | str) -> torch.Tensor:
    """float64 values of the chosen distribution (cast to the dtype later)."""
    import torch

    f64 = torch.float64
    dist = choice.dist
    if dist == "normal":  # param: a scale (the largest the reference allows, see early.MAGNITUDE)
        x = torch.randn(shape, generator=gen, dtype=f64, device=device)
        return x * choice.param if choice.param > 0 else x
    if dist == "uniform_pos":
        return torch.rand(shape, generator=gen, dtype=f64, device=device) * 0.999 + 0.001
    if dist == "offset":
        return torch.randn(shape, generator=gen, dtype=f64, device=device) + (choice.param or 8.0)
    if dist == "heavy_tail":
        z = torch.randn(shape, generator=gen, dtype=f64, device=device)
        chi = torch.randn((2, *shape), generator=gen, dtype=f64, device=device).pow(2).mean(0)
        return (z / chi.clamp_min(1e-4).sqrt()).clamp(-1e4, 1e4)  # Student-t, 2 dof
    if dist == "peaked":
        return _peaked(shape, choice.param or 20.0, gen, device)
    if dist == "neg_inf_spans":
        return _neg_inf_spans(shape, gen, device)
    if dist == "ties":
        return torch.randint(-3, 4, shape, generator=gen, device=device).to(f64)
    if dist == "denormal":
        x = torch.randn(shape, generator=gen, dtype=f64, device=device)
        tiny = torch.finfo(torch_dtype(choice.dtype)).tiny
        mask = torch.rand(shape, generator=gen, dtype=f64, device=device) < 0.3
        small = torch.rand(shape, generator=gen, dtype=f64, device=device) * tiny * 0.9
        return torch.where(mask, small, x)
    raise ValueError(f"unknown distribution {dist!r}")


def _peaked(shape: tuple[int, ...], strength: float, gen: torch.Generator, device: torch.device | str) -> torch.Tensor:
    """Logits with one hot class per row: +strength (in sigmas) above the rest in even rows,
    +0.4 x strength in odd rows. A bug confined to the near-one-hot rows then hides in the
    norm, which the broader rows dominate, and shows in the worst element."""
    import torch

    x = torch.randn(shape, generator=gen, dtype=torch.float64, device=device)
    if not shape or x.numel() == 0:
        return x
    rows = x.reshape(-1, shape[-1])
    hot = torch.randint(0, shape[-1], (rows.shape[0], 1), generator=gen, device=device)
    level = torch.full((rows.shape[0], 1), strength, dtype=torch.float64, device=device)
    level[1::2] *= 0.4
    rows.scatter_(-1, hot, level)
    return rows.reshape(shape)


def _neg_inf_spans(shape: tuple[int, ...], gen: torch.Generator, device: torch.device | str) -> torch.Tensor:
    """Normal values with a contiguous run of -inf in every row (as attention masks make),
    and, where there are several rows, one row that is -inf throughout."""
    import torch

    x = torch.randn(shape, generator=gen, dtype=torch.float64, device=device)
    if not shape or x.numel() == 0:
        return x
    n = shape[-1]
    rows = x.reshape(-1, n)
    start = torch.randint(0, n, (rows.shape[0], 1), generator=gen, device=device)
    length = torch.randint(0, n + 1, (rows.shape[0], 1), generator=gen, device=device)
    col = torch.arange(n, device=device).unsqueeze(0)
    rows.masked_fill_((col >= start) & (col < start + length), -math.inf)
    if rows.shape[0] > 1:
        rows[int(torch.randint(0, rows.shape[0], (1,), generator=gen, device=device))] = -math.inf
    return rows.reshape(shape)


def _to_dtype(values: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """Cast, saturating finite values to the dtype's range (an overflow to inf or NaN would
    make the case meaningless); infinities that the distribution asked for stay."""
    import torch

    # only narrow dtypes can overflow: every distribution stays far below float32's range
    if dtype.is_floating_point and torch.finfo(dtype).max < 1e6:
        big = torch.finfo(dtype).max
        values = torch.where(torch.isfinite(values), values.clamp(-big, big), values)
    return values.to(dtype)


def _index_values(choice: InputChoice, shape: tuple[int, ...], high: int, gen: torch.Generator, device: torch.device | str) -> torch.Tensor:
    import torch

    high = max(high, 1)
    n = math.prod(shape)
    if choice.dist == "uniform":
        v = torch.randint(0, high, (n,), generator=gen, device=device)
    elif choice.dist == "zipf":
        ranks = torch.arange(1, high + 1, dtype=torch.float64, device=device)
        probs = ranks.pow(-1.2)
        draw = torch.multinomial(probs / probs.sum(), max(n, 1), replacement=True, generator=gen)[:n]
        perm = torch.randperm(high, generator=gen, device=device)
        v = perm[draw]  # hot ids scattered over the id space
    elif choice.dist == "same":
        v = torch.full((n,), int(torch.randint(0, high, (1,), generator=gen, device=device).item()),
                       device=device, dtype=torch.int64)
    elif choice.dist == "sorted":
        v = torch.randint(0, high, (n,), generator=gen, device=device).sort().values
    else:
        raise ValueError(f"unknown index distribution {choice.dist!r}")
    return v.reshape(shape)


def _layout(shape: tuple[int, ...], layout: str, itemsize: int) -> tuple[tuple[int, ...], tuple[int, ...], int]:
    """(shape, stride, storage offset) of the view, for a logical ``shape``."""
    if layout == "transposed" and len(shape) >= 2:
        swapped = (*shape[:-2], shape[-1], shape[-2])
        st = list(contiguous_stride(swapped))
        st[-1], st[-2] = st[-2], st[-1]
        return shape, tuple(st), 0
    if layout == "sliced" and shape:
        wide = (*shape[:-1], shape[-1] * 2)
        st = list(contiguous_stride(wide))
        st[-1] = 2
        return shape, tuple(st), 0
    if layout == "narrowed" and len(shape) >= 2:
        # columns [0, n) of a tensor with n + pad columns: rows are not n elements apart
        wide = (*shape[:-1], shape[-1] + max(3, shape[-1] // 2 + 1))
        return shape, contiguous_stride(wide), 0
    if layout == "expanded" and shape and shape[0] > 1:
        st = list(contiguous_stride(shape))
        st[0] = 0
        return shape, tuple(st), 0
    if layout == "offset":
        return shape, contiguous_stride(shape), max(1, 64 // itemsize) + 3  # misaligned on purpose
    return shape, contiguous_stride(shape), 0


def shape_of(spec_shape: Sequence[str | int], dims: dict[str, int]) -> tuple[int, ...]:
    return tuple(dims[d] if isinstance(d, str) else int(d) for d in spec_shape)


def peak_at(logits: torch.Tensor, labels: torch.Tensor, margin: float) -> torch.Tensor:
    """``logits`` (float64, shape ``(*labels.shape, C)``) with each row's label logit set to
    ``logsumexp(the other logits) + margin``: softmax gives the label ``sigmoid(margin)``."""
    import torch

    if logits.numel() == 0:
        return logits
    rows = logits.reshape(-1, logits.shape[-1]).clone()
    lab = labels.reshape(-1, 1).to(torch.int64)
    rest = rows.scatter(-1, lab, -math.inf)
    lse = torch.logsumexp(rest, -1, keepdim=True)
    level = torch.where(torch.isfinite(lse), lse + margin, torch.full_like(lse, margin))
    return rows.scatter(-1, lab, level).reshape(logits.shape)


def _raw_values(spec: Spec, case: Case, gen: torch.Generator, device: torch.device | str
                ) -> dict[str, torch.Tensor]:
    """Every input's values (floats in float64), coupled inputs peaked at their index."""
    raw: dict[str, torch.Tensor] = {}
    for name, inp in spec.inputs.items():
        choice = case.inputs[name]
        shape = shape_of(inp.shape, case.dims)
        if isinstance(inp, Index):
            high = case.dims[inp.high] if isinstance(inp.high, str) else int(inp.high)
            raw[name] = _index_values(choice, shape, high, gen, device)
        else:
            raw[name] = _float_values(choice, shape, gen, device)
    for name, inp in spec.inputs.items():
        if not isinstance(inp, Index):
            continue
        choice = case.inputs[name]
        # a case token from before couplings were recorded: peak_of= coupled every case
        couple = choice.couple or (f"peak:{inp.peak_of}" if inp.peak_of is not None else "")
        if couple:
            couplings.apply(raw, spec, name, couple, choice.param, gen)
    return raw


def materialize(spec: Spec, case: Case, device: torch.device | str, *, salt: int = 0) -> Materialized:
    import torch

    gen = torch.Generator(device=device)
    gen.manual_seed(case.seed * 31 + salt)
    tensors, guarded, snaps = {}, {}, {}
    raw = _raw_values(spec, case, gen, device)
    for name, inp in spec.inputs.items():
        choice = case.inputs[name]
        shape = shape_of(inp.shape, case.dims)
        dtype = torch_dtype(choice.dtype)
        if isinstance(inp, Index):
            values = raw[name].to(dtype)
        else:
            assert isinstance(inp, Tensor)
            values = _to_dtype(raw[name], dtype)
        vshape, stride, offset = _layout(shape, choice.layout, values.element_size())
        g = guarded_strided(name, vshape, stride, offset, dtype, device)
        if stride and stride[0] == 0:  # zero-stride: every row is the same memory
            g.view[:1].copy_(values[:1])
        else:
            g.view.copy_(values)
        tensors[name] = g.view
        guarded[name] = g
        snaps[name] = g.buffer.clone()
    return Materialized(case, tensors, guarded, snaps)


def reference_inputs(spec: Spec, m: Materialized, *, upcast: bool) -> dict[str, torch.Tensor]:
    """Contiguous copies for the reference: float inputs in float64 (``upcast``) or their own dtype."""
    import torch

    out = {}
    for name, t in m.tensors.items():
        c = t.detach().clone(memory_format=torch.contiguous_format)
        if upcast and c.is_floating_point():
            c = c.to(torch.float64)
        out[name] = c
    return out


# Size of the input perturbation that measures the problem's conditioning: one ulp of the
# arithmetic the kernel computes in (fp32 for fp32/fp16/bf16/fp8 data, float64 for float64
# data). One ulp rather than half: a single sample of torch's rounding can be lucky, and a
# reduction's own rounding (the mean of a row with a large offset) is not an input
# perturbation at all, so the envelope needs the margin.
PERTURBATION = {"float64": 2.0**-52}
PERTURBATION_DEFAULT = 2.0**-23


def perturbed_inputs(spec: Spec, m: Materialized, seed: int) -> dict[str, torch.Tensor]:
    """float64 reference inputs, each float element moved by u x r x max(|x|, rms of its
    row), r uniform in [-1, 1] and u the rounding unit of the arithmetic the kernel computes
    in. The row's rms term is the normwise part: a reduction's rounding error scales with the
    magnitude of what it sums (the mean of a row with a large offset), not with each element."""
    import torch

    out = reference_inputs(spec, m, upcast=True)
    gen = torch.Generator(device=next(iter(m.tensors.values())).device) if m.tensors else None
    if gen is not None:
        gen.manual_seed(seed * 13 + 7)
    for name, c in out.items():
        if not c.is_floating_point() or gen is None:
            continue
        u = PERTURBATION.get(m.case.inputs[name].dtype, PERTURBATION_DEFAULT)
        r = torch.rand(c.shape, generator=gen, dtype=torch.float32, device=c.device).to(torch.float64) * 2 - 1
        scale = c.abs()
        if c.dim() >= 1 and c.numel():
            finite = torch.where(torch.isfinite(c), c, torch.zeros_like(c))
            scale = torch.maximum(scale, finite.pow(2).mean(-1, keepdim=True).sqrt())
        out[name] = c + (u * r) * scale
    return out
