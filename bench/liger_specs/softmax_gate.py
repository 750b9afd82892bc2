"""Liger-Kernel's softmax over the last dim, forward and backward, as ``LigerSoftmax`` calls it. The
reference is torch's own softmax.
"""
import torch

import gpu_gate as gg
from liger_kernel.ops.softmax import LigerSoftmaxFunction


@gg.spec(
    dims={"rows": gg.Dim(1, 4096), "cols": gg.Dim(1, 16384, reduction=True)},
    inputs={"x": gg.Tensor(("rows", "cols"), dtypes=["float32", "bfloat16", "float16"])},
    reference=lambda x: torch.softmax(x, dim=-1),
    grads=["x"],
)
def softmax_gate(x):
    return LigerSoftmaxFunction.apply(x)
