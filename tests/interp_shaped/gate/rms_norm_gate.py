"""RMSNorm forward and backward, as a model calls it through the autograd Function (eps 1e-6)."""
import torch

import gpu_gate as gg
from normkit.rms_norm import RMSNormFunction
from gpu_gate.spec import upcast

EPS = 1e-6


def rms_norm(x, w):
    h = upcast(x)
    return (h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + EPS) * upcast(w)).to(x.dtype)


@gg.spec(
    dims={"rows": gg.Dim(1, 64), "hidden": gg.Dim(1, 2048, reduction=True)},
    inputs={"x": gg.Tensor(("rows", "hidden"), dtypes=["float32", "float16", "bfloat16"]),
            "w": gg.Tensor(("hidden",), dtype="like:x")},
    reference=rms_norm,
    grads=["x", "w"],
)
def rms_norm_gate(x, w):
    return RMSNormFunction.apply(x, w, EPS, 0.0)
