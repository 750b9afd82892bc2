"""A per-channel scale ``y = x * w`` as a fused-kernel library wraps it: the backward picks how to
reduce dW over the rows by the input's shape. With many rows and a handful of channels it splits
the rows across programs and adds their partial sums one block after another; everywhere else
one reduction does it. The split path keeps its running total in ``acc`` (bf16 in the bug: every
add rounds, and over 100000 rows the partial sums drown)."""
import numpy as np
import torch

MANY_ROWS = 100_000
FEW_CHANNELS = 4
BLOCK = 256


def _dw_one_pass(prod: torch.Tensor) -> torch.Tensor:
    """Sums the rows one after another in fp32 (``np.add.accumulate`` is sequential)."""
    a = np.add.accumulate(prod.detach().float().cpu().numpy(), axis=0)
    return torch.from_numpy(np.ascontiguousarray(a[-1])).to(prod.device)


def _dw_split(prod: torch.Tensor, acc: torch.dtype) -> torch.Tensor:
    total = torch.zeros(prod.shape[1:], dtype=acc, device=prod.device)
    for start in range(0, prod.shape[0], BLOCK):
        total = (total.float() + prod[start:start + BLOCK].float().sum(0)).to(acc)
    return total.float()


def dweight(dy: torch.Tensor, x: torch.Tensor, split_acc: torch.dtype) -> torch.Tensor:
    n_rows, n_cols = x.shape
    prod = dy.float() * x.float()
    if n_rows >= MANY_ROWS and n_cols <= FEW_CHANNELS:
        return _dw_split(prod, split_acc)
    return _dw_one_pass(prod)


class _Scale(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, w, split_acc):
        ctx.save_for_backward(x, w)
        ctx.split_acc = split_acc
        return x * w

    @staticmethod
    def backward(ctx, dy):
        x, w = ctx.saved_tensors
        return dy * w, dweight(dy, x, ctx.split_acc).to(w.dtype), None


def scale(x: torch.Tensor, w: torch.Tensor, split_acc: torch.dtype = torch.float32) -> torch.Tensor:
    return _Scale.apply(x, w, split_acc)
