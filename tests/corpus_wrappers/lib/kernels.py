"""Correct Triton RMSNorm kernels. Every planted bug of this corpus is in the host code that
launches them (lib/ops.py): the kernels never change."""
import triton
import triton.language as tl


@triton.jit
def rmsnorm_strided(X, W, Y, stride_xr, stride_xc, stride_yr, n_rows, n_cols, eps,
                    ROWS: tl.constexpr, BLOCK: tl.constexpr):
    rows = tl.program_id(0) * ROWS + tl.arange(0, ROWS)[:, None]
    cols = tl.arange(0, BLOCK)[None, :]
    mask = (rows < n_rows) & (cols < n_cols)
    x = tl.load(X + rows * stride_xr + cols * stride_xc, mask=mask, other=0.0).to(tl.float32)
    w = tl.load(W + cols, mask=cols < n_cols, other=0.0).to(tl.float32)
    inv = 1.0 / tl.sqrt(tl.sum(x * x, axis=1) / n_cols + eps)
    y = x * inv[:, None] * w
    tl.store(Y + rows * stride_yr + cols, y.to(Y.dtype.element_ty), mask=mask)


@triton.jit
def rmsnorm_packed(X, W, Y, stride_xr, stride_yr, n_cols, eps, BLOCK: tl.constexpr):
    """One row per program; rows are packed (unit column stride) in X and Y."""
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    mask = cols < n_cols
    x = tl.load(X + row * stride_xr + cols, mask=mask, other=0.0).to(tl.float32)
    w = tl.load(W + cols, mask=mask, other=0.0).to(tl.float32)
    inv = 1.0 / tl.sqrt(tl.sum(x * x, axis=0) / n_cols + eps)
    tl.store(Y + row * stride_yr + cols, (x * inv * w).to(Y.dtype.element_ty), mask=mask)
