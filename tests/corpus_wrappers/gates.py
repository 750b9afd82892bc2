"""The spec a careful user writes for an RMSNorm, once per wrapper of lib/ops.py."""
import torch

import gpu_gate as gg
from lib import ops

DECL = dict(
    dims={"rows": gg.Dim(1, 48), "hidden": gg.Dim(1, 192, reduction=True)},
    inputs={"x": gg.Tensor(("rows", "hidden"), dtypes=["float32", "float16"]),
            "w": gg.Tensor(("hidden",), dtype="like:x")},
    reference=lambda x, w: x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6) * w,
)


@gg.spec(name="rmsnorm", **DECL)
def rmsnorm(x, w):
    return ops.rmsnorm(x, w)


@gg.spec(name="rmsnorm_unit_col_stride", **DECL)
def rmsnorm_unit_col_stride(x, w):
    return ops.rmsnorm_unit_col_stride(x, w)


@gg.spec(name="rmsnorm_floor_grid", **DECL)
def rmsnorm_floor_grid(x, w):
    return ops.rmsnorm_floor_grid(x, w)


@gg.spec(name="rmsnorm_rows", **DECL)
def rmsnorm_rows(x, w):
    return ops.rmsnorm_rows(x, w)


@gg.spec(name="rmsnorm_rows_no_contiguous", **DECL)
def rmsnorm_rows_no_contiguous(x, w):
    return ops.rmsnorm_rows_no_contiguous(x, w)


@gg.spec(name="rmsnorm_empty_like", **DECL)
def rmsnorm_empty_like(x, w):
    return ops.rmsnorm_empty_like(x, w)
