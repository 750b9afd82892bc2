"""A bias add whose backward sums the upstream gradient over the rows with atomics in the bias's
own dtype (bfloat16 models keep a bfloat16 bias), as group norms' weight gradients do."""
import torch
import triton
import triton.language as tl

ROWS_PER_PROGRAM = 16


@triton.jit
def _bias_grad(DY, DB, row_stride, n_rows, n_cols, ROWS: tl.constexpr, BLOCK: tl.constexpr):
    first = tl.program_id(0) * ROWS
    cols = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)
    inside = cols < n_cols
    acc = tl.zeros((BLOCK,), dtype=tl.float32)
    for row in range(first, tl.minimum(first + ROWS, n_rows)):
        acc += tl.load(DY + row * row_stride + cols, mask=inside, other=0).to(tl.float32)
    tl.atomic_add(DB + cols, acc.to(DB.dtype.element_ty), mask=inside)


class AddBias(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, b):
        return x + b

    @staticmethod
    def backward(ctx, dy):
        dx = dy
        dy = dy.reshape(-1, dy.shape[-1]).contiguous()
        rows, n_cols = dy.shape
        db = torch.zeros(n_cols, dtype=dy.dtype, device=dy.device)
        grid = (triton.cdiv(rows, ROWS_PER_PROGRAM), triton.cdiv(n_cols, 128))
        _bias_grad[grid](dy, db, dy.stride(0), rows, n_cols, ROWS=ROWS_PER_PROGRAM, BLOCK=128)
        return dx, db
