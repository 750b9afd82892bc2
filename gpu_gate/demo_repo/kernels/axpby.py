import torch
import triton
import triton.language as tl


@triton.jit
def _axpby_kernel(x_ptr, y_ptr, out_ptr, alpha, beta, n, BLOCK: tl.constexpr):
    pid = tl.program_id(0)
    offs = pid * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask)
    y = tl.load(y_ptr + offs, mask=mask)
    tl.store(out_ptr + offs, alpha * x + beta * y, mask=mask)


def axpby(x: torch.Tensor, y: torch.Tensor, alpha: float, beta: float) -> torch.Tensor:
    x, y = x.contiguous(), y.contiguous()
    out = torch.empty_like(x)
    n = x.numel()
    BLOCK = 1024
    _axpby_kernel[(triton.cdiv(n, BLOCK),)](x, y, out, alpha, beta, n, BLOCK=BLOCK)
    return out
