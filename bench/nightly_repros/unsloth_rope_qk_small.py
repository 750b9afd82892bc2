"""Standalone: unsloth's fast_rope_embedding with position ids (its fused Q/K kernel) on small heads.

    PYTHONPATH=<unsloth checkout with stand-ins> python unsloth_rope_qk_small.py

Plain torch and unsloth, no gpu-gate. For each shape and layout it rotates the same q and k twice
(fresh copies each time, ten times) and prints whether the two results agree and their largest error against
the NeoX rotation computed in float64."""
import itertools

import torch
from unsloth.kernels.rope_embedding import fast_rope_embedding


def cache(positions, head_dim, dtype):
    exponent = torch.arange(0, head_dim, 2, dtype=torch.float64, device="cuda") / head_dim
    angles = torch.arange(positions, dtype=torch.float64, device="cuda")[:, None] / 10000.0 ** exponent
    both = torch.cat([angles, angles], dim=-1)
    return both.cos().to(dtype), both.sin().to(dtype)


def rot(x, cos, sin):
    a, b = x.chunk(2, dim=-1)
    return x * cos + torch.cat([-b, a], dim=-1) * sin


def layout(t, how):
    if how == "contiguous":
        return t.clone()
    # as the attention layer hands it over: (batch, seq, heads, dim) projections viewed as (batch, heads, seq, dim)
    return t.transpose(1, 2).contiguous().transpose(1, 2)


torch.manual_seed(0)
for (batch, qh, kh, seq, hd, positions), dtype, how in itertools.product(
        [(1, 8, 1, 2, 2, 1), (1, 8, 1, 2, 2, 8192), (1, 8, 2, 5, 4, 16), (1, 14, 2, 128, 64, 4096),
         (1, 32, 8, 128, 64, 4096), (2, 32, 8, 64, 128, 4096)],
        [torch.bfloat16, torch.float32], ["contiguous", "transposed view"]):
    q0 = torch.randn(batch, qh, seq, hd, device="cuda").to(dtype)
    k0 = torch.randn(batch, kh, seq, hd, device="cuda").to(dtype)
    pos = torch.randint(0, positions, (batch, seq), device="cuda")
    cos, sin = cache(positions, hd, dtype)
    outs = []
    for _ in range(10):
        q, k = layout(q0, how), layout(k0, how)
        qo, ko = fast_rope_embedding(q, k, cos, sin, pos)
        torch.cuda.synchronize()
        outs.append((qo.clone(), ko.clone()))
    c64, s64 = cache(positions, hd, torch.float64)
    c, s = c64[pos].unsqueeze(1), s64[pos].unsqueeze(1)
    tq, tk = rot(q0.double(), c, s), rot(k0.double(), c, s)
    differ = sum(not all(torch.equal(a, b) for a, b in zip(outs[0], o)) for o in outs[1:])
    err = max((outs[0][0].double() - tq).abs().max().item(), (outs[0][1].double() - tk).abs().max().item())
    print(f"batch={batch} q_heads={qh} kv_heads={kh} seq={seq} head_dim={hd} positions={positions} {dtype} {how}: "
          f"{differ}/{len(outs) - 1} runs differ from the first, max error {err:.3g}")
