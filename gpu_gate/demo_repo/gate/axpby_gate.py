import torch

import gpu_gate as gg
from kernels.axpby import axpby


@gg.spec(
    dims={"n": gg.Dim(1, 1 << 16)},
    inputs={"x": gg.Tensor(("n",), dtypes=["float32", "float16"]), "y": gg.Tensor(("n",), dtype="like:x")},
    params={"alpha": 0.5, "beta": -2.0},
    reference=lambda x, y, alpha, beta: alpha * x + beta * y,
)
def axpby_gate(x, y, alpha, beta):
    return axpby(x, y, alpha, beta)
