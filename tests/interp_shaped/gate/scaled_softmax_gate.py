"""Softmax of logits scaled by 1/sqrt(head_dim), as attention code calls it."""
import torch

import gpu_gate as gg
from normkit.softmax import scaled_softmax
from gpu_gate.spec import upcast

SCALE = 0.125


@gg.spec(
    dims={"rows": gg.Dim(1, 64), "cols": gg.Dim(1, 2048, reduction=True)},
    inputs={"x": gg.Tensor(("rows", "cols"), dtypes=["float16", "bfloat16", "float32"])},
    reference=lambda x: torch.softmax(upcast(x) * SCALE, dim=-1).to(x.dtype),
)
def scaled_softmax_gate(x):
    return scaled_softmax(x, SCALE)
