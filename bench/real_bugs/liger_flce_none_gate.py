"""Liger-Kernel's fused linear cross entropy with per-token losses (``reduction="none"``).

A trainer that weights tokens itself (a per-token mask, a per-sample weight, a custom loss on
top) asks for the loss of each token and back-propagates its own, different gradient for each.
The reference is the plain projection and cross entropy, in float64 where gpu-gate computes the
truth.
"""
import torch
import torch.nn.functional as F

import gpu_gate as gg
from liger_kernel.ops.fused_linear_cross_entropy import LigerFusedLinearCrossEntropyFunction


def per_token_loss(x, weight, bias, target):
    return F.cross_entropy(x @ weight.T + bias, target, reduction="none")


@gg.spec(
    dims={"tokens": gg.Dim(1, 2048), "hidden": gg.Dim(1, 1024), "vocab": gg.Dim(2, 8192)},
    inputs={"x": gg.Tensor(("tokens", "hidden"), dtypes=["float32", "bfloat16"]),
            "weight": gg.Tensor(("vocab", "hidden"), dtype="like:x"),
            "bias": gg.Tensor(("vocab",), dtype="like:x"),
            "target": gg.Index(("tokens",), high="vocab")},
    reference=per_token_loss,
    grads=["x", "weight", "bias"],
)
def liger_flce_none_gate(x, weight, bias, target):
    loss, *_ = LigerFusedLinearCrossEntropyFunction.apply(x, weight, target, bias, None, -100, 0.0, 0.0, "none")
    return loss
