"""Liger-Kernel's rotary embedding as a Llama-style model calls it.

The model computes cos and sin from each sequence's own position ids, so they have a batch
dimension: (batch, seq, head_dim). The reference is the rotate-half formula in plain torch.
"""
import torch

import gpu_gate as gg
from liger_kernel.ops.rope import LigerRopeFunction

THETA = 10000.0


def cos_sin(position_ids, head_dim, dtype):
    """The rotary tables of a Llama-style model for these positions: (batch, seq, head_dim)."""
    exponent = torch.arange(0, head_dim, 2, dtype=torch.float64, device=position_ids.device) / head_dim
    angles = position_ids[..., None].double() / THETA**exponent
    both = torch.cat([angles, angles], dim=-1)
    return both.cos().to(dtype), both.sin().to(dtype)


def rotate_half(x):
    first, second = x.chunk(2, dim=-1)
    return torch.cat([-second, first], dim=-1)


def rotary(q, k, position_ids):
    cos, sin = cos_sin(position_ids, q.shape[-1], q.dtype)
    cos, sin = cos.unsqueeze(1), sin.unsqueeze(1)  # broadcast over the heads
    return {"q": q * cos + rotate_half(q) * sin, "k": k * cos + rotate_half(k) * sin}


@gg.spec(
    dims={"batch": gg.Dim(1, 4), "q_heads": gg.Dim(1, 32), "kv_heads": gg.Dim(1, 8), "seq": gg.Dim(1, 512),
          "head_dim": gg.Dim(2, 256, multiple_of=2), "positions": gg.Dim(1, 8192)},
    inputs={"q": gg.Tensor(("batch", "q_heads", "seq", "head_dim"), dtypes=["float32", "bfloat16"]),
            "k": gg.Tensor(("batch", "kv_heads", "seq", "head_dim"), dtype="like:q"),
            "position_ids": gg.Index(("batch", "seq"), high="positions")},
    reference=rotary,
    grads=["q", "k"],
    # A model hands q and k over as views of (batch, seq, heads, head_dim) projections; the kernel
    # then rotates them where they are (its .contiguous() copies nothing).
    mutates={"q": "q", "k": "k"},
)
def liger_rope_gate(q, k, position_ids):
    cos, sin = cos_sin(position_ids, q.shape[-1], q.dtype)
    q_out, k_out = LigerRopeFunction.apply(q, k, cos, sin)
    return {"q": q_out, "k": k_out}
