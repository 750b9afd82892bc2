"""Mamba-2's chunked SSD scan with a gated output, forward and backward, as a Mamba2 layer trains.

``mamba_chunk_scan_combined`` as the Mamba2 layer calls it without its fused RMS norm
(``rmsnorm=False``): ``dt`` raw, with ``dt_bias`` and softplus applied inside, ``A = -exp(A_log)``,
``B`` and ``C`` shared by the heads of a group, a skip ``D`` per channel (``D_has_hdim=True``,
(nheads, headdim)) and the output gated by ``z``: out = (y + D * x) * silu(z). Each row of the
batch is one sequence. x is drawn as (batch, seqlen, ngroups, heads per group, headdim), so that
the heads always divide into the groups, and handed over as (batch, seqlen, nheads, headdim).

The reference is the state space model written out directly, in its quadratic (attention-like)
form: token t reads every token s <= t with weight
(C_t . B_s) * exp(sum of dt_k * A over s < k <= t) * dt_s. It knows nothing of chunks, so every
chunk size must give the same result.
"""
import torch
import torch.nn.functional as F

import gpu_gate as gg
from mamba_ssm.ops.triton.ssd_combined import mamba_chunk_scan_combined


def ssd(x, dt, A, B, C):
    """y = SSM(x) in quadratic form. x (b, l, h, p), dt (b, l, h) after softplus, A (h,),
    B and C (b, l, g, n)."""
    batch, seqlen, nheads, _ = x.shape
    heads_per_group = nheads // B.shape[2]
    B = B.repeat_interleave(heads_per_group, dim=2)  # (b, l, h, n): each head's group
    C = C.repeat_interleave(heads_per_group, dim=2)
    a = (dt * A).transpose(1, 2)  # (b, h, l): the log of each token's decay
    # decay[t, s] = sum of a[k] for s < k <= t, summed directly (no difference of long cumsums)
    below = torch.ones(seqlen, seqlen, dtype=torch.bool, device=x.device).tril(-1)
    decay = torch.where(below, a[..., :, None].expand(batch, nheads, seqlen, seqlen), 0).cumsum(dim=-2)
    causal = torch.ones(seqlen, seqlen, dtype=torch.bool, device=x.device).tril()
    weight = torch.where(causal, decay.exp(), 0) * torch.einsum("bthn,bshn->bhts", C, B)
    return torch.einsum("bhts,bsh,bshp->bthp", weight, dt, x)


def gated_scan(x, z, dt, A_log, B, C, D, dt_bias, chunk_size):
    batch, seqlen, ngroups, heads_per_group, headdim = x.shape
    x = x.reshape(batch, seqlen, ngroups * heads_per_group, headdim)
    z = z.reshape(x.shape)
    dt = F.softplus(dt.reshape(batch, seqlen, -1) + dt_bias.reshape(-1))
    y = ssd(x, dt, -torch.exp(A_log.reshape(-1)), B, C) + D.reshape(-1, headdim) * x
    return (y * F.silu(z)).to(x.dtype)


@gg.spec(
    dims={"batch": gg.Dim(1, 4), "seqlen": gg.Dim(1, 1024), "ngroups": gg.Dim(1, 4),
          "heads_per_group": gg.Dim(1, 4), "headdim": gg.Dim(8, 128, multiple_of=8),
          "dstate": gg.Dim(8, 128, multiple_of=8),
          "chunk_size": gg.Dim(64, 256, values=[64, 128, 256])},
    inputs={"x": gg.Tensor(("batch", "seqlen", "ngroups", "heads_per_group", "headdim"),
                           dtypes=["float32", "float16", "bfloat16"]),
            "z": gg.Tensor(("batch", "seqlen", "ngroups", "heads_per_group", "headdim"), dtype="like:x"),
            "dt": gg.Tensor(("batch", "seqlen", "ngroups", "heads_per_group"), dtype="like:x"),
            # A = -exp(A_log): a model's decay rates keep A_log within a few units of 0
            "A_log": gg.Tensor(("ngroups", "heads_per_group"), dtype="float32", dists=["normal", "uniform_pos"]),
            "B": gg.Tensor(("batch", "seqlen", "ngroups", "dstate"), dtype="like:x"),
            "C": gg.Tensor(("batch", "seqlen", "ngroups", "dstate"), dtype="like:x"),
            "D": gg.Tensor(("ngroups", "heads_per_group", "headdim"), dtype="float32"),
            "dt_bias": gg.Tensor(("ngroups", "heads_per_group"), dtype="float32")},
    reference=gated_scan,
    dim_args=["chunk_size"],
    grads=["x", "z", "dt", "A_log", "B", "C", "D", "dt_bias"],
    devices=["cuda"],  # the wrappers enter torch.cuda.device(x.device.index)
)
def mamba_chunk_scan_gate(x, z, dt, A_log, B, C, D, dt_bias, chunk_size):
    batch, seqlen, ngroups, heads_per_group, headdim = x.shape
    nheads = ngroups * heads_per_group
    return mamba_chunk_scan_combined(
        x.reshape(batch, seqlen, nheads, headdim), dt.reshape(batch, seqlen, nheads), -torch.exp(A_log.reshape(-1)),
        B, C, chunk_size, D=D.reshape(nheads, headdim), z=z.reshape(batch, seqlen, nheads, headdim),
        dt_bias=dt_bias.reshape(-1), dt_softplus=True)
