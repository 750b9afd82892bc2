"""Softmax of scaled logits, one program per row, as attention and sampling code writes it: the
float ``scale`` is a float32 scalar in the compiled kernel, so ``x * scale`` is float32 for float16
and bfloat16 data too, and ``tl.exp`` (float32 and float64 only) takes it."""
import torch
import triton
import triton.language as tl

from normkit.launch import row_block


@triton.jit
def _scaled_softmax_fwd(Y, X, row_stride, n_cols, scale, BLOCK: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    cols = tl.arange(0, BLOCK)
    inside = cols < n_cols
    z = tl.load(X + row * row_stride + cols, mask=inside, other=-float("inf")) * scale
    e = tl.exp(z - tl.max(z, axis=0).to(z.dtype))  # the row's max, in the scores' own dtype
    tl.store(Y + row * row_stride + cols, (e / tl.sum(e, axis=0)).to(Y.dtype.element_ty), mask=inside)


def scaled_softmax(x, scale=1.0):
    shape = x.shape
    x = x.reshape(-1, shape[-1]).contiguous()
    y = torch.empty_like(x)
    block, warps = row_block(x.shape[1])
    _scaled_softmax_fwd[(x.shape[0],)](y, x, x.stride(0), x.shape[1], scale, BLOCK=block, num_warps=warps)
    return y.view(*shape)
