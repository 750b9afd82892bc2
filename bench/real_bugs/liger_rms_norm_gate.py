"""Liger-Kernel's RMSNorm as a Llama-style model calls it, forward and backward.

The model normalises each token's hidden state, (batch x seq, hidden), and scales it by a learned
weight; eps is 1e-6 and the casting is Llama's. ``in_place=False`` (as Liger's own Gemma 2 patch
passes it) keeps the upstream gradient intact. The reference is the formula, in float64 where
gpu-gate computes the truth.
"""
import torch

import gpu_gate as gg
from liger_kernel.ops.rms_norm import LigerRMSNormFunction

EPS = 1e-6


def rms_norm(x, w):
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + EPS) * w


@gg.spec(
    dims={"rows": gg.Dim(1, 4096), "hidden": gg.Dim(1, 8192)},
    inputs={"x": gg.Tensor(("rows", "hidden"), dtypes=["float32", "bfloat16"]),
            "w": gg.Tensor(("hidden",), dtype="like:x")},
    reference=rms_norm,
    grads=["x", "w"],
)
def liger_rms_norm_gate(x, w):
    return LigerRMSNormFunction.apply(x, w, EPS, 0.0, "llama", False)
