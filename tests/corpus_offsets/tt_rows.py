"""Row-wise Triton kernels as libraries write them: the row's offset is its program index times
the row stride. Past 2^31 elements the 32-bit product wraps; the twins widen the index first."""
import triton
import triton.language as tl


@triton.jit
def scale_rows_int32(Y, Y_stride, X, X_stride, n_cols, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    mask = cols < n_cols
    x = tl.load(X + row * X_stride + cols, mask=mask, other=0.0)
    tl.store(Y + row * Y_stride + cols, x * 2.0, mask=mask)


@triton.jit
def scale_rows_int64(Y, Y_stride, X, X_stride, n_cols, BLOCK: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    cols = tl.arange(0, BLOCK)
    mask = cols < n_cols
    x = tl.load(X + row * X_stride + cols, mask=mask, other=0.0)
    tl.store(Y + row * Y_stride + cols, x * 2.0, mask=mask)


@triton.jit
def dequant_tiles_int32(Y, X, S, M, N, BLOCK: tl.constexpr):
    pid_m = tl.program_id(0)
    pid_n = tl.program_id(1)
    offs_m = pid_m * BLOCK + tl.arange(0, BLOCK)
    offs_n = pid_n * BLOCK + tl.arange(0, BLOCK)
    offs = offs_m[:, None] * N + offs_n[None, :]
    mask = (offs_m[:, None] < M) & (offs_n[None, :] < N)
    x = tl.load(X + offs, mask=mask, other=0.0)
    tl.store(Y + offs, x * tl.load(S), mask=mask)


@triton.jit
def dequant_tiles_int64(Y, X, S, M, N, BLOCK: tl.constexpr):
    pid_m = tl.program_id(0)
    pid_n = tl.program_id(1)
    offs_m = pid_m.to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    offs_n = pid_n * BLOCK + tl.arange(0, BLOCK)
    offs = offs_m[:, None] * N + offs_n[None, :]
    mask = (offs_m[:, None] < M) & (offs_n[None, :] < N)
    x = tl.load(X + offs, mask=mask, other=0.0)
    tl.store(Y + offs, x * tl.load(S), mask=mask)


@triton.jit
def copy_blocks(Y, X, n, BLOCK: tl.constexpr):
    # program index times a constant: wraps only for one dimension past 2^31, not reported
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(Y + offs, tl.load(X + offs, mask=mask), mask=mask)
