"""RMSNorm whose kernel addresses row r at r * n_cols (the bug) instead of r * stride(0)
(the twin). Both wrappers make the last dim contiguous first, as most wrappers do, so the
bug shows only for inputs whose rows are not packed (a column slice of a wider tensor,
a broadcast row)."""
import torch

import gpu_gate as gg

DECL = dict(
    dims={"rows": gg.Dim(1, 64), "hidden": gg.Dim(1, 2048)},
    inputs={"x": gg.Tensor(("rows", "hidden"), dtypes=["float32", "float16"]),
            "w": gg.Tensor(("hidden",), dtype="like:x")},
    reference=lambda x, w: x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6) * w,
)


def _rmsnorm(x: torch.Tensor, w: torch.Tensor, row_stride: int | None) -> torch.Tensor:
    if x.stride(-1) != 1:
        x = x.contiguous()
    rows, n = x.shape
    stride = x.stride(0) if row_stride is None else row_stride
    # what the kernel's pointer arithmetic reads
    seen = torch.as_strided(x, (rows, n), (stride, 1), x.storage_offset()).float()
    y = seen * torch.rsqrt(seen.pow(2).mean(-1, keepdim=True) + 1e-6) * w.float()
    return y.to(x.dtype)


@gg.spec(name="rmsnorm_packed_rows", **DECL)
def rmsnorm_bug(x, w):
    return _rmsnorm(x, w, row_stride=x.shape[-1])


@gg.spec(name="rmsnorm_row_stride", **DECL)
def rmsnorm_twin(x, w):
    return _rmsnorm(x, w, row_stride=None)
