"""unsloth's fused rotary embedding of q and k, as its Llama attention calls it with position ids.

The attention layer projects the hidden states and views them as (batch, heads, seq, head_dim): q
and k are transposed views of the projections, not contiguous. With position ids (packed sequences,
as TRL hands them over) it calls ``fast_rope_embedding(Q, K, cos, sin, position_ids)``, which rotates
both in one kernel, in place where it can. cos and sin are the model's rotary cache, one row per
position, (positions, head_dim), in the model's dtype. Grouped-query attention has at most as many
key heads as query heads. The reference is the NeoX "rotate half" rotation written out in plain
torch. The kernel writes its results into q and k (and the gradients into the upstream gradient's
memory); ``mutates`` says so.
"""
import torch

import gpu_gate as gg
from unsloth.kernels.rope_embedding import fast_rope_embedding

THETA = 10000.0


def rotary_cache(positions, head_dim, dtype, device):
    """The model's cos and sin caches: one row per position, the angles repeated over both halves."""
    exponent = torch.arange(0, head_dim, 2, dtype=torch.float64, device=device) / head_dim
    angles = torch.arange(positions, dtype=torch.float64, device=device)[:, None] / THETA**exponent
    both = torch.cat([angles, angles], dim=-1)
    return both.cos().to(dtype), both.sin().to(dtype)


def rotate_half(x):
    first, second = x.chunk(2, dim=-1)
    return torch.cat([-second, first], dim=-1)


def rotary(q, k, position_ids, positions):
    cos, sin = rotary_cache(positions, q.shape[-1], q.dtype, q.device)
    cos, sin = cos[position_ids].unsqueeze(1), sin[position_ids].unsqueeze(1)  # (batch, 1, seq, head_dim)
    return {"q": q * cos + rotate_half(q) * sin, "k": k * cos + rotate_half(k) * sin}


@gg.spec(
    dims={"batch": gg.Dim(1, 4), "q_heads": gg.Dim(8, 32), "kv_heads": gg.Dim(1, 8), "seq": gg.Dim(1, 512),
          "head_dim": gg.Dim(2, 256, multiple_of=2), "positions": gg.Dim(1, 8192)},
    inputs={"q": gg.Tensor(("batch", "q_heads", "seq", "head_dim"), dtypes=["float32", "bfloat16", "float16"]),
            "k": gg.Tensor(("batch", "kv_heads", "seq", "head_dim"), dtype="like:q"),
            "position_ids": gg.Index(("batch", "seq"), high="positions")},
    reference=rotary,
    grads=["q", "k"],
    mutates={"q": "q", "k": "k"},
    dim_args=["positions"],
    devices=["cuda"],  # unsloth refuses to import without a GPU
)
def unsloth_rope_qk_gate(q, k, position_ids, positions):
    cos, sin = rotary_cache(positions, q.shape[-1], q.dtype, q.device)
    q_out, k_out = fast_rope_embedding(q, k, cos, sin, position_ids)
    return {"q": q_out, "k": k_out}
