"""Liger-Kernel's fused residual add + RMSNorm, forward and backward, as a decoder layer calls it
(``LigerFusedAddRMSNorm``, Llama's casting): ``s = x + residual`` is returned as the next residual,
and ``rmsnorm(s) * w`` as the normalised hidden state. The reference is the same two steps in plain
torch: the add in the data's dtype, then Hugging Face's LlamaRMSNorm.
"""
import torch

import gpu_gate as gg
from gpu_gate.spec import upcast
from liger_kernel.ops.fused_add_rms_norm import LigerFusedAddRMSNormFunction

EPS = 1e-6


def add_rms_norm(x, r, w):
    s = x + r
    h = upcast(s)
    h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + EPS)
    return w * h.to(s.dtype), s


@gg.spec(
    dims={"rows": gg.Dim(1, 4096), "hidden": gg.Dim(1, 16384, reduction=True)},
    inputs={"x": gg.Tensor(("rows", "hidden"), dtypes=["float32", "bfloat16", "float16"]),
            "r": gg.Tensor(("rows", "hidden"), dtype="like:x"),
            "w": gg.Tensor(("hidden",), dtype="like:x")},
    reference=add_rms_norm,
    grads=["x", "r", "w"],
)
def fused_add_rms_norm_gate(x, r, w):
    return LigerFusedAddRMSNormFunction.apply(x, r, w, EPS, 0.0, "llama", False)
