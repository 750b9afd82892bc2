"""RMSNorm, one program per row: y = x * rsqrt(mean(x^2) + eps) * (offset + w).

Its scalar arguments are cast in the kernel (``eps.to(tl.float32)``): a compiled kernel takes a float
argument as a float32 scalar, so the cast keeps the arithmetic in float32 whatever the caller passes."""
import torch
import triton
import triton.language as tl
from triton.language.extra.libdevice import rsqrt

from normkit.launch import row_block


@triton.jit
def _rms_norm_fwd(Y, X, W, RSTD, row_stride, n_cols, eps, offset, BLOCK: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    cols = tl.arange(0, BLOCK)
    inside = cols < n_cols
    x = tl.load(X + row * row_stride + cols, mask=inside, other=0).to(tl.float32)
    w = tl.load(W + cols, mask=inside, other=0).to(tl.float32)
    rstd = rsqrt(tl.sum(x * x, axis=0) / n_cols + eps.to(tl.float32))
    tl.store(RSTD + row, rstd)
    y = x * rstd * (offset.to(tl.float32) + w)
    tl.store(Y + row * row_stride + cols, y.to(Y.dtype.element_ty), mask=inside)


@triton.jit
def _rms_norm_bwd(DY, DX, X, W, RSTD, DW, row_stride, n_rows, n_cols, offset, BLOCK: tl.constexpr):
    cols = tl.arange(0, BLOCK)
    inside = cols < n_cols
    w = tl.load(W + cols, mask=inside, other=0).to(tl.float32) + offset.to(tl.float32)
    dw = tl.zeros((BLOCK,), dtype=tl.float32)
    for row in range(0, n_rows):
        x = tl.load(X + row * row_stride + cols, mask=inside, other=0).to(tl.float32)
        dy = tl.load(DY + row * row_stride + cols, mask=inside, other=0).to(tl.float32)
        rstd = tl.load(RSTD + row)
        m = dy * w
        dx = rstd * (m - (rstd * rstd / n_cols) * tl.sum(m * x, axis=0) * x)
        dw += dy * x * rstd
        tl.store(DX + row * row_stride + cols, dx.to(DX.dtype.element_ty), mask=inside)
    tl.store(DW + cols, dw, mask=inside)


def rms_norm_forward(X, W, eps, offset):
    shape = X.shape
    X = X.reshape(-1, shape[-1])
    rows, n_cols = X.shape
    Y = torch.empty_like(X)
    RSTD = torch.empty(rows, dtype=torch.float32, device=X.device)
    block, warps = row_block(n_cols)
    _rms_norm_fwd[(rows,)](Y, X, W, RSTD, X.stride(0), n_cols, eps, offset, BLOCK=block, num_warps=warps)
    return Y.view(*shape), X, RSTD


def rms_norm_backward(dY, X, W, RSTD, offset):
    shape = dY.shape
    dY = dY.reshape(-1, shape[-1]).contiguous()
    rows, n_cols = dY.shape
    dX = torch.empty_like(dY)
    dW = torch.empty(n_cols, dtype=torch.float32, device=W.device)
    block, warps = row_block(n_cols)
    _rms_norm_bwd[(1,)](dY, dX, X, W, RSTD, dW, X.stride(0), rows, n_cols, offset, BLOCK=block, num_warps=warps)
    return dX.view(*shape), dW.to(W.dtype)


class RMSNormFunction(torch.autograd.Function):
    @staticmethod
    def forward(ctx, X, W, eps, offset=0.0, in_place=False):
        W = W.contiguous()
        Y, X, RSTD = rms_norm_forward(X.contiguous(), W, eps, offset)
        ctx.offset = offset
        ctx.save_for_backward(X, W, RSTD)
        return Y

    @staticmethod
    def backward(ctx, dY):
        X, W, RSTD = ctx.saved_tensors
        dX, dW = rms_norm_backward(dY, X, W, RSTD, ctx.offset)
        return dX, dW, None, None, None


class RMSNorm(torch.nn.Module):
    def __init__(self, hidden_size, eps=1e-6, offset=0.0):
        super().__init__()
        self.weight = torch.nn.Parameter(torch.ones(hidden_size))
        self.eps, self.offset = eps, offset

    def forward(self, hidden_states):
        return RMSNormFunction.apply(hidden_states, self.weight, self.eps, self.offset)
