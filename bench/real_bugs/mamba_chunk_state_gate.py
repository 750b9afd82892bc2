"""Mamba-2's chunked SSD scan on packed variable-length sequences, forward and backward.

A trainer that packs documents of different lengths into one row gives ``mamba_chunk_scan_combined``
a ``seq_idx`` (batch, seqlen) saying which document each token belongs to, so that no state flows
from one document into the next; the documents start anywhere, in the middle of a chunk or on its
edge. The call is the one the Mamba2 layer makes: ``dt`` raw, with ``dt_bias`` and softplus applied
inside, ``A = -exp(A_log)``, a skip ``D`` per head, ``B`` and ``C`` shared by the heads of a group.
Here the documents are drawn as their start positions in the row, and ``seq_idx`` counts the starts
at or before each token. x is drawn as (batch, seqlen, ngroups, heads per group, headdim), so that
the heads always divide into the groups, and handed over as (batch, seqlen, nheads, headdim).

The reference is the state space model written out directly, in its quadratic (attention-like)
form: token t reads token s of the same document, s <= t, with weight
(C_t . B_s) * exp(sum of dt_k * A over s < k <= t) * dt_s, plus D * x_t. It knows nothing of
chunks, so every chunk size must give the same result.
"""
import torch
import torch.nn.functional as F

import gpu_gate as gg
from mamba_ssm.ops.triton.ssd_combined import mamba_chunk_scan_combined


def document_ids(doc_starts, seqlen):
    """seq_idx (batch, seqlen) int32: how many documents start at or before each token."""
    tokens = torch.arange(seqlen, device=doc_starts.device)
    return (doc_starts[:, None, :] <= tokens[None, :, None]).sum(-1).to(torch.int32)


def ssd(x, dt, A, B, C, D, seq_idx):
    """y = SSM(x) in quadratic form. x (b, l, h, p), dt (b, l, h) after softplus, A (h,),
    B and C (b, l, g, n), D (h,), seq_idx (b, l)."""
    batch, seqlen, nheads, _ = x.shape
    heads_per_group = nheads // B.shape[2]
    B = B.repeat_interleave(heads_per_group, dim=2)  # (b, l, h, n): each head's group
    C = C.repeat_interleave(heads_per_group, dim=2)
    a = (dt * A).transpose(1, 2)  # (b, h, l): the log of each token's decay
    # decay[t, s] = sum of a[k] for s < k <= t, summed directly (no difference of long cumsums)
    below = torch.ones(seqlen, seqlen, dtype=torch.bool, device=x.device).tril(-1)
    decay = torch.where(below, a[..., :, None].expand(batch, nheads, seqlen, seqlen), 0).cumsum(dim=-2)
    causal = torch.ones(seqlen, seqlen, dtype=torch.bool, device=x.device).tril()
    same_doc = (seq_idx[:, :, None] == seq_idx[:, None, :])[:, None]  # (b, 1, t, s)
    weight = torch.where(causal & same_doc, decay.exp(), 0) * torch.einsum("bthn,bshn->bhts", C, B)
    y = torch.einsum("bhts,bsh,bshp->bthp", weight, dt, x)
    return y + D[:, None] * x


def packed_scan(x, dt, A_log, B, C, D, dt_bias, doc_starts, chunk_size):
    batch, seqlen, ngroups, heads_per_group, headdim = x.shape
    x = x.reshape(batch, seqlen, ngroups * heads_per_group, headdim)
    dt = F.softplus(dt.reshape(batch, seqlen, -1) + dt_bias.reshape(-1))
    y = ssd(x, dt, -torch.exp(A_log.reshape(-1)), B, C, D.reshape(-1), document_ids(doc_starts, seqlen))
    return y.to(x.dtype)


@gg.spec(
    dims={"batch": gg.Dim(1, 4), "seqlen": gg.Dim(1, 1024), "ngroups": gg.Dim(1, 4),
          "heads_per_group": gg.Dim(1, 4), "headdim": gg.Dim(8, 128, multiple_of=8),
          "dstate": gg.Dim(8, 128, multiple_of=8), "docs": gg.Dim(1, 8),
          "chunk_size": gg.Dim(64, 256, values=[64, 128, 256])},
    inputs={"x": gg.Tensor(("batch", "seqlen", "ngroups", "heads_per_group", "headdim"),
                           dtypes=["float32", "float16", "bfloat16"]),
            "dt": gg.Tensor(("batch", "seqlen", "ngroups", "heads_per_group"), dtype="like:x"),
            # A = -exp(A_log): a model's decay rates keep A_log within a few units of 0
            "A_log": gg.Tensor(("ngroups", "heads_per_group"), dtype="float32", dists=["normal", "uniform_pos"]),
            "B": gg.Tensor(("batch", "seqlen", "ngroups", "dstate"), dtype="like:x"),
            "C": gg.Tensor(("batch", "seqlen", "ngroups", "dstate"), dtype="like:x"),
            "D": gg.Tensor(("ngroups", "heads_per_group"), dtype="float32"),
            "dt_bias": gg.Tensor(("ngroups", "heads_per_group"), dtype="float32"),
            "doc_starts": gg.Index(("batch", "docs"), high="seqlen")},
    reference=packed_scan,
    dim_args=["chunk_size"],
    grads=["x", "dt", "A_log", "B", "C", "D", "dt_bias"],
    devices=["cuda"],  # the wrappers enter torch.cuda.device(x.device.index)
)
def mamba_chunk_state_gate(x, dt, A_log, B, C, D, dt_bias, doc_starts, chunk_size):
    batch, seqlen, ngroups, heads_per_group, headdim = x.shape
    nheads = ngroups * heads_per_group
    return mamba_chunk_scan_combined(
        x.reshape(batch, seqlen, nheads, headdim), dt.reshape(batch, seqlen, nheads), -torch.exp(A_log.reshape(-1)),
        B, C, chunk_size, D=D.reshape(-1), dt_bias=dt_bias.reshape(-1), dt_softplus=True,
        seq_idx=document_ids(doc_starts, seqlen))
