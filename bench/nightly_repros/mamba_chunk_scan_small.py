"""Standalone: mamba_ssm's mamba_chunk_scan_combined on small float32 inputs against the SSM in float64.

    PYTHONPATH=<mamba checkout> python mamba_chunk_scan_small.py

Plain torch and mamba_ssm, no gpu-gate. For a few small shapes it prints the largest error of the
output against the quadratic form computed in float64, relative to the output's scale, next to the
error torch's own float32 computation of the same form makes. Run it again with
TRITON_F32_DEFAULT=ieee to see whether Triton's TF32 default for float32 dot products is the cause."""
import os

import torch
import torch.nn.functional as F
from mamba_ssm.ops.triton.ssd_combined import mamba_chunk_scan_combined


def ssd(x, dt, A, B, C):
    batch, seqlen, nheads, _ = x.shape
    rep = nheads // B.shape[2]
    B, C = B.repeat_interleave(rep, dim=2), C.repeat_interleave(rep, dim=2)
    a = (dt * A).transpose(1, 2)
    below = torch.ones(seqlen, seqlen, dtype=torch.bool, device=x.device).tril(-1)
    decay = torch.where(below, a[..., :, None].expand(batch, nheads, seqlen, seqlen), 0).cumsum(dim=-2)
    causal = torch.ones(seqlen, seqlen, dtype=torch.bool, device=x.device).tril()
    weight = torch.where(causal, decay.exp(), 0) * torch.einsum("bthn,bshn->bhts", C, B)
    return torch.einsum("bhts,bsh,bshp->bthp", weight, dt, x)


def run(batch, seqlen, ngroups, hpg, headdim, dstate, chunk):
    g = torch.Generator(device="cuda").manual_seed(0)
    h = ngroups * hpg
    x = torch.randn(batch, seqlen, h, headdim, device="cuda", generator=g)
    z = torch.randn_like(x)
    dt = torch.randn(batch, seqlen, h, device="cuda", generator=g)
    A_log = torch.randn(h, device="cuda", generator=g)
    B = torch.randn(batch, seqlen, ngroups, dstate, device="cuda", generator=g)
    C = torch.randn_like(B)
    D = torch.randn(h, headdim, device="cuda", generator=g)
    dt_bias = torch.randn(h, device="cuda", generator=g)
    out = mamba_chunk_scan_combined(x, dt, -torch.exp(A_log), B, C, chunk, D=D, z=z, dt_bias=dt_bias,
                                    dt_softplus=True)

    def ref(dtype):
        xs, zs, Bs, Cs = (t.to(dtype) for t in (x, z, B, C))
        d = F.softplus(dt.to(dtype) + dt_bias.to(dtype))
        y = ssd(xs, d, -torch.exp(A_log.to(dtype)), Bs, Cs) + D.to(dtype) * xs
        return y * F.silu(zs)

    truth = ref(torch.float64)
    scale = truth.abs().max().item()
    err = (out.double() - truth).abs().max().item()
    torch_err = (ref(torch.float32).double() - truth).abs().max().item()
    print(f"b={batch} l={seqlen} g={ngroups} hpg={hpg} p={headdim} n={dstate} chunk={chunk}: "
          f"max |out - truth| = {err:.3e} ({err / scale:.2e} of max |truth|); torch float32: {torch_err:.3e}")


print("TRITON_F32_DEFAULT =", os.environ.get("TRITON_F32_DEFAULT", "(unset)"))
for shape in [(1, 1, 1, 1, 8, 8, 64), (1, 7, 1, 1, 8, 8, 64), (2, 100, 2, 2, 64, 64, 64), (1, 300, 1, 4, 32, 16, 128)]:
    run(*shape)
