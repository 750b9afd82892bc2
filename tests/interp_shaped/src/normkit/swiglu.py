"""SwiGLU, one program per row: silu(gate) * up, the product taken in the data's own dtype (the
activation is computed in float32 and cast back first, as Llama's MLP does in bfloat16 models)."""
import torch
import triton
import triton.language as tl

from normkit.launch import row_block


@triton.jit
def _swiglu_fwd(A, B, C, row_stride, n_cols, BLOCK: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    cols = tl.arange(0, BLOCK)
    inside = cols < n_cols
    a = tl.load(A + row * row_stride + cols, mask=inside, other=0).to(tl.float32)
    b = tl.load(B + row * row_stride + cols, mask=inside, other=0)
    tl.store(C + row * row_stride + cols, (a * tl.sigmoid(a)).to(b.dtype) * b, mask=inside)


def swiglu(gate, up):
    shape = gate.shape
    gate = gate.reshape(-1, shape[-1]).contiguous()
    up = up.reshape(-1, shape[-1]).contiguous()
    out = torch.empty_like(gate)
    block, warps = row_block(gate.shape[1])
    _swiglu_fwd[(gate.shape[0],)](gate, up, out, gate.stride(0), gate.shape[1], BLOCK=block, num_warps=warps)
    return out.view(*shape)
