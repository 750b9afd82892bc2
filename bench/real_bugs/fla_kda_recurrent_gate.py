"""flash-linear-attention's fused recurrent Kimi Delta Attention (KDA), as its attention layer calls it.

``fused_recurrent_kda`` runs the gated delta rule one token at a time; fla's KDA layer uses it for
short inputs at inference (a decoding step, a short prompt), with the options the layer passes:
q and k L2-normalised in the kernel, the gate computed in the kernel from the raw gate projection g
(``-exp(A_log) * softplus(g + dt_bias)``, per key channel), beta given as logits (sigmoid in the
kernel), a recurrent state carried in from the cache and returned, laid out (value, key). Per
token t and head, with S the (head_v, head_k) state:

    S = S * exp(gate_t)              (each key channel decays by its own gate)
    u = sigmoid(beta_t) * (v_t - S k_t)
    S = S + u k_t^T
    o_t = S q_t / sqrt(head_k)

The head sizes range over every size the function accepts, not only powers of two. The reference is
this recurrence in plain torch, in at least float32 (the kernel keeps the state in float32), with the
output rounded once to the data's dtype; the final state is compared as well.
"""
import torch
import torch.nn.functional as F

import gpu_gate as gg
from gpu_gate.spec import upcast
from fla.ops.kda.fused_recurrent import fused_recurrent_kda


def l2_normalize(x):
    return x * torch.rsqrt(x.pow(2).sum(-1, keepdim=True) + 1e-6)


def kda_reference(q, k, v, g, beta, A_log, dt_bias, h0):
    dtype = v.dtype
    q, k, v, g, beta, A_log, dt_bias, h0 = (upcast(t) for t in (q, k, v, g, beta, A_log, dt_bias, h0))
    q = l2_normalize(q) * q.shape[-1] ** -0.5
    k = l2_normalize(k)
    gate = -A_log.exp()[:, None] * F.softplus(g + dt_bias)  # (batch, seq, heads, head_k)
    beta = beta.sigmoid()
    state = h0.to(q.dtype)  # (batch, heads, head_v, head_k)
    outs = []
    for t in range(q.shape[1]):
        state = state * gate[:, t, :, None, :].exp()
        u = beta[:, t, :, None] * (v[:, t] - (state @ k[:, t, :, :, None])[..., 0])
        state = state + u[..., :, None] * k[:, t, :, None, :]
        outs.append((state @ q[:, t, :, :, None])[..., 0])
    return {"o": torch.stack(outs, dim=1).to(dtype), "state": state}


@gg.spec(
    dims={"batch": gg.Dim(1, 4), "seq": gg.Dim(1, 64), "heads": gg.Dim(1, 16),
          "head_k": gg.Dim(1, 256), "head_v": gg.Dim(1, 256)},
    inputs={"q": gg.Tensor(("batch", "seq", "heads", "head_k"), dtypes=["float32", "bfloat16"]),
            "k": gg.Tensor(("batch", "seq", "heads", "head_k"), dtype="like:q"),
            "v": gg.Tensor(("batch", "seq", "heads", "head_v"), dtype="like:q"),
            "g": gg.Tensor(("batch", "seq", "heads", "head_k"), dtype="like:q"),
            "beta": gg.Tensor(("batch", "seq", "heads"), dtype="like:q"),
            # the layer's parameters, kept in float32: A_log is the log of a decay rate (1 to 16 at
            # initialisation), dt_bias a small bias per key channel
            "A_log": gg.Tensor(("heads",), dtype="float32", dists=["normal", "uniform_pos"]),
            "dt_bias": gg.Tensor(("heads", "head_k"), dtype="float32", dists=["normal", "uniform_pos"]),
            "h0": gg.Tensor(("batch", "heads", "head_v", "head_k"), dtype="float32")},
    reference=kda_reference,
)
def fla_kda_recurrent_gate(q, k, v, g, beta, A_log, dt_bias, h0):
    o, state = fused_recurrent_kda(
        q, k, v, g, beta, A_log=A_log, dt_bias=dt_bias.reshape(-1), initial_state=h0, output_final_state=True,
        use_qk_l2norm_in_kernel=True, use_gate_in_kernel=True, use_beta_sigmoid_in_kernel=True,
        state_v_first=True)
    return {"o": o, "state": state}
