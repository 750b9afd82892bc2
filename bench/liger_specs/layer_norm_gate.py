"""Liger-Kernel's LayerNorm, forward and backward, as ``LigerLayerNorm`` (a drop-in for
``nn.LayerNorm`` over the hidden size, eps 1e-6) calls it. The reference is torch's own layer norm.
"""
import torch.nn.functional as F

import gpu_gate as gg
from liger_kernel.ops.layer_norm import LigerLayerNormFunction

EPS = 1e-6


@gg.spec(
    dims={"rows": gg.Dim(1, 4096), "hidden": gg.Dim(1, 16384, reduction=True)},
    inputs={"x": gg.Tensor(("rows", "hidden"), dtypes=["float32", "bfloat16", "float16"]),
            "w": gg.Tensor(("hidden",), dtype="like:x"),
            "b": gg.Tensor(("hidden",), dtype="like:x")},
    reference=lambda x, w, b: F.layer_norm(x, x.shape[-1:], w, b, EPS),
    grads=["x", "w", "b"],
)
def layer_norm_gate(x, w, b):
    return LigerLayerNormFunction.apply(x, w, b, EPS)
