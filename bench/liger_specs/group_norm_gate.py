"""Liger-Kernel's GroupNorm, forward and backward, as ``LigerGroupNorm`` (a drop-in for
``nn.GroupNorm``) calls it on (batch, channels, spatial) activations, with 4 groups and eps 1e-6.
The reference is torch's own group norm. Liger's own tests cover float32; its backward also
handles bfloat16 (it accumulates the weight gradients with bfloat16 atomics), so both are checked.
"""
import torch.nn.functional as F

import gpu_gate as gg
from liger_kernel.ops.group_norm import LigerGroupNormFunction

GROUPS = 4
EPS = 1e-6


@gg.spec(
    dims={"batch": gg.Dim(1, 16), "channels": gg.Dim(GROUPS, 256, multiple_of=GROUPS),
          "spatial": gg.Dim(1, 4096, reduction=True)},
    inputs={"x": gg.Tensor(("batch", "channels", "spatial"), dtypes=["float32", "bfloat16"]),
            "w": gg.Tensor(("channels",), dtype="like:x"),
            "b": gg.Tensor(("channels",), dtype="like:x")},
    reference=lambda x, w, b: F.group_norm(x, GROUPS, w, b, EPS),
    grads=["x", "w", "b"],
)
def group_norm_gate(x, w, b):
    return LigerGroupNormFunction.apply(x, w, b, x.shape[1], GROUPS, EPS)
