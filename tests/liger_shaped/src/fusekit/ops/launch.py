"""How the row kernels are launched: one program per row, the whole row in one block."""
import functools

import torch
import triton

LARGEST_BLOCK = 1 << 16


def row_block(width):
    """(BLOCK, num_warps) for rows of ``width`` elements."""
    block = triton.next_power_of_2(width)
    if block > LARGEST_BLOCK:
        raise ValueError(f"rows of {width} elements do not fit in one block of at most {LARGEST_BLOCK}")
    return block, min(32, max(4, block // 256))


def contiguous_args(method):
    """An autograd Function's forward or backward, called with contiguous tensors."""

    @functools.wraps(method)
    def call(ctx, *args):
        return method(ctx, *(a.contiguous() if isinstance(a, torch.Tensor) else a for a in args))

    return call
