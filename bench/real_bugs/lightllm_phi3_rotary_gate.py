"""LightLLM's phi3 rotary embedding, as the phi3 layer calls it during inference.

The layer hands over the packed tokens of a batch: q as (tokens, q_heads, head_dim) and k as the
key heads of the fused kv projection, (tokens, kv_heads, head_dim), with as many query heads per key
head as the model's grouping says (q is drawn as (tokens, kv_heads, group, head_dim) so that a key
head always has its query heads). cos and sin are the rotary tables of each token's own position,
(tokens, rot_dim), in the data's dtype. The kernel rotates q and k in place, the NeoX "rotate half"
way over the first 2 * rot_dim dims, and leaves the rest of each head alone: the whole head with
the default ``partial_rotary_factor`` of 1.0, a part of it with partial rotary (Phi-4-mini rotates
3/4 of its head); the spec draws 1/2, 3/4 and 1. Head dims include those whose half is not a power
of two (Phi-3-mini's 96). The reference is the rotation written out in plain torch.
"""
import torch

import gpu_gate as gg
from lightllm.models.phi3.triton_kernel.rotary_emb import rotary_emb_fwd

THETA = 10000.0


def rotary_dims(head_dim, rotary_quarters):
    """The number of dims rotated in each half (the kernel's rot_dim) for a partial rotary factor."""
    return int(head_dim * rotary_quarters / 4) // 2


def cos_sin(position_ids, rot_dim, dtype):
    """The rotary tables of these positions, (tokens, rot_dim), as the model builds them."""
    exponent = torch.arange(0, rot_dim, dtype=torch.float64, device=position_ids.device) / rot_dim
    angles = position_ids[:, None].double() / THETA**exponent
    return angles.cos().to(dtype), angles.sin().to(dtype)


def rotate(x, cos, sin, rot_dim):
    """x (tokens, heads..., head_dim) with its first 2 * rot_dim dims rotated, the rest as they were."""
    shape = (x.shape[0],) + (1,) * (x.dim() - 2) + (rot_dim,)
    cos, sin = cos.reshape(shape), sin.reshape(shape)
    x0, x1, rest = x[..., :rot_dim], x[..., rot_dim:2 * rot_dim], x[..., 2 * rot_dim:]
    return torch.cat([x0 * cos - x1 * sin, x0 * sin + x1 * cos, rest], dim=-1)


def rotary(q, k, position_ids, rotary_quarters):
    rot_dim = rotary_dims(q.shape[-1], rotary_quarters)
    cos, sin = cos_sin(position_ids, rot_dim, q.dtype)
    return {"q": rotate(q, cos, sin, rot_dim), "k": rotate(k, cos, sin, rot_dim)}


@gg.spec(
    dims={"tokens": gg.Dim(1, 4096), "kv_heads": gg.Dim(1, 16), "group": gg.Dim(1, 8),
          "head_dim": gg.Dim(16, 256, multiple_of=8), "positions": gg.Dim(1, 32768),
          # the partial rotary factor, in quarters: 1/2, 3/4 or the whole head
          "rotary_quarters": gg.Dim(2, 4, values=[2, 3, 4])},
    inputs={"q": gg.Tensor(("tokens", "kv_heads", "group", "head_dim"), dtypes=["float16", "bfloat16", "float32"]),
            "k": gg.Tensor(("tokens", "kv_heads", "head_dim"), dtype="like:q"),
            "position_ids": gg.Index(("tokens",), high="positions")},
    reference=rotary,
    dim_args=["rotary_quarters"],
    # the layer's q and k are rotated where they are: the kernel writes its result into them
    mutates={"q": "q", "k": "k"},
)
def lightllm_phi3_rotary_gate(q, k, position_ids, rotary_quarters):
    tokens, kv_heads, group, head_dim = q.shape
    cos, sin = cos_sin(position_ids, rotary_dims(head_dim, rotary_quarters), q.dtype)
    heads = q.reshape(tokens, kv_heads * group, head_dim)  # the layer's q: a view where the layout allows
    rotary_emb_fwd(heads, k, cos, sin, partial_rotary_factor=rotary_quarters / 4)
    if heads.data_ptr() != q.data_ptr():  # reshape had to copy: put the rotated heads back
        q.copy_(heads.view(q.shape))
    return {"q": q, "k": k}
