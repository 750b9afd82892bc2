"""flash-linear-attention's fused RMSNorm, swish gate and output projection, forward and backward.

``rms_norm_swish_gate_linear(x, g, norm_weight, norm_bias, linear_weight, linear_bias)`` is how a
gated linear-attention layer (LightNet, for one) ends: the attention output x is RMS-normalised,
scaled by the norm's weight, multiplied by silu of the gate projection g, and projected back to the
hidden size by the output projection. The fused function does the norm and the gate in one kernel and
recomputes them in the backward rather than keeping them, so a training step depends on the
backward's gradients of all five tensors: x, g, the norm's weight and the projection's weight and bias.
The RMSNorm has no bias (fla's RMSNorm modules have none). The feature size ranges over the sizes
attention layers use, small and large (the library picks another kernel for wide rows). The reference
is the same composition in plain torch.
"""
import torch
import torch.nn.functional as F

import gpu_gate as gg
from fla.modules.fused_norm_gate import rms_norm_swish_gate_linear

EPS = 1e-6  # the function's default


def norm_gate_linear(x, g, norm_weight, linear_weight, linear_bias):
    y = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + EPS) * norm_weight
    return F.linear(y * F.silu(g), linear_weight, linear_bias)


@gg.spec(
    dims={"batch": gg.Dim(1, 8), "seq": gg.Dim(1, 1024), "features": gg.Dim(1, 4096), "hidden": gg.Dim(1, 2048)},
    inputs={"x": gg.Tensor(("batch", "seq", "features"), dtypes=["float32", "bfloat16"]),
            "g": gg.Tensor(("batch", "seq", "features"), dtype="like:x"),
            "norm_weight": gg.Tensor(("features",), dtype="like:x"),
            "linear_weight": gg.Tensor(("hidden", "features"), dtype="like:x"),
            "linear_bias": gg.Tensor(("hidden",), dtype="like:x")},
    reference=norm_gate_linear,
    grads=["x", "g", "norm_weight", "linear_weight", "linear_bias"],
)
def fla_norm_gate_linear_gate(x, g, norm_weight, linear_weight, linear_bias):
    return rms_norm_swish_gate_linear(x, g, norm_weight, None, linear_weight, linear_bias, eps=EPS)
