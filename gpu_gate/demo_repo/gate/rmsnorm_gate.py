import torch

import gpu_gate as gg
from kernels.rmsnorm import rmsnorm


@gg.spec(
    dims={"rows": gg.Dim(1, 64), "hidden": gg.Dim(1, 4096, reduction=True)},
    inputs={"x": gg.Tensor(("rows", "hidden"), dtypes=["float32", "float16", "bfloat16"]),
            "w": gg.Tensor(("hidden",), dtype="like:x")},
    reference=lambda x, w: x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6) * w,
)
def rmsnorm_gate(x, w):
    return rmsnorm(x, w)
