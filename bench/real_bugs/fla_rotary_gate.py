"""flash-linear-attention's rotary embedding in batched generation, with left padding and a KV cache.

``rotary_embedding(x, cos, sin, seqlen_offsets=...)`` rotates x, laid out (batch, seq, heads, head_dim),
by the cos/sin tables of a rotary position embedding. With a tensor of per-sequence offsets, token t of
sequence b sits at position t + offset[b]. fla's attention layers pass ``tokens already in the cache -
left padding`` there, so a prompt left-padded by p tokens has offset -p during prefill: its first p rows
are padding, at negative positions. The spec draws each sequence's padding and cached length
independently, so a batch mixes sequences with and without either, and the table covers every position.

The padding rows hold no token. The spec does not say what the library writes there, only that it is a
number: both sides multiply those rows by zero, so a finite value passes and a NaN or Inf does not
(a NaN in a padded row is not removed by an attention weight of zero: 0 x NaN is NaN). The gradient
goes through the same mask. The reference is the rotate-half (GPT-NeoX) formula in plain torch on
tables computed in float64 and rounded to the data's dtype, as the candidate's are.
"""
import torch

import gpu_gate as gg
from fla.modules.rotary import rotary_embedding

THETA = 10000.0


def angles(positions, head_dim):
    """position x inverse frequency, in float64: (..., head_dim // 2)."""
    exponent = torch.arange(0, head_dim, 2, dtype=torch.float64, device=positions.device) / head_dim
    return positions[..., None].double() / THETA**exponent


def positions_of(x, pad, cached):
    """Each token's position, (batch, seq): t + cached tokens - left padding."""
    t = torch.arange(x.shape[1], device=x.device)
    return t[None, :] + (cached - pad)[:, None]


def rotate_half(x):
    first, second = x.chunk(2, dim=-1)
    return torch.cat([-second, first], dim=-1)


def rotary_reference(x, pad, cached, cache):
    pos = positions_of(x, pad, cached)
    a = angles(pos.clamp(min=0), x.shape[-1])
    cos = torch.cat([a.cos(), a.cos()], dim=-1).to(x.dtype)[:, :, None, :]  # broadcast over the heads
    sin = torch.cat([a.sin(), a.sin()], dim=-1).to(x.dtype)[:, :, None, :]
    keep = (pos >= 0).to(x.dtype)[:, :, None, None]
    return (x * cos + rotate_half(x) * sin) * keep


@gg.spec(
    dims={"batch": gg.Dim(1, 8), "seq": gg.Dim(1, 2048), "heads": gg.Dim(1, 32),
          "head_dim": gg.Dim(2, 256, multiple_of=2), "cache": gg.Dim(1, 4096)},
    inputs={"x": gg.Tensor(("batch", "seq", "heads", "head_dim"), dtypes=["float32", "bfloat16", "float16"]),
            "pad": gg.Index(("batch",), high="seq"),
            "cached": gg.Index(("batch",), high="cache")},
    dim_args=["cache"],
    reference=rotary_reference,
    grads=["x"],
)
def fla_rotary_gate(x, pad, cached, cache):
    # The model's tables: one row per position up to the longest sequence plus the cache.
    a = angles(torch.arange(x.shape[1] + cache, device=x.device), x.shape[-1])
    cos, sin = a.cos().to(x.dtype), a.sin().to(x.dtype)
    pos = positions_of(x, pad, cached)
    y = rotary_embedding(x, cos, sin, seqlen_offsets=cached - pad)
    return y * (pos >= 0).to(x.dtype)[:, :, None, None]
