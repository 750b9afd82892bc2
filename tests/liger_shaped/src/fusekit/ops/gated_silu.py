"""Gated SiLU, the gate of a Llama-style MLP: out = silu(gate) * up, one row per program."""
import torch
import triton
import triton.language as tl

from fusekit.ops.launch import contiguous_args, row_block


@triton.jit
def _gated_silu_fwd(gate, up, out, row_stride, width: tl.constexpr, BLOCK: tl.constexpr):
    start = tl.program_id(0).to(tl.int64) * row_stride
    cols = tl.arange(0, BLOCK)
    inside = cols < width
    g = tl.load(gate + start + cols, mask=inside, other=0).to(tl.float32)
    u = tl.load(up + start + cols, mask=inside, other=0)
    silu = g / (1.0 + tl.exp(-g))
    tl.store(out + start + cols, silu.to(u.dtype) * u, mask=inside)


@triton.jit
def _gated_silu_bwd(dout, gate, up, dgate, dup, row_stride, width: tl.constexpr, BLOCK: tl.constexpr):
    start = tl.program_id(0).to(tl.int64) * row_stride
    cols = tl.arange(0, BLOCK)
    inside = cols < width
    d = tl.load(dout + start + cols, mask=inside, other=0).to(tl.float32)
    g = tl.load(gate + start + cols, mask=inside, other=0).to(tl.float32)
    u = tl.load(up + start + cols, mask=inside, other=0).to(tl.float32)
    sig = 1.0 / (1.0 + tl.exp(-g))
    # d silu(g) / dg = sig * (1 + g * (1 - sig)); the gate is recomputed, not stored
    tl.store(dgate + start + cols, (d * u * sig * (1.0 + g * (1.0 - sig))).to(dgate.dtype.element_ty), mask=inside)
    tl.store(dup + start + cols, (d * g * sig).to(dup.dtype.element_ty), mask=inside)


def gated_silu_forward(gate, up):
    shape = gate.shape

    width = shape[-1]
    gate = gate.view(-1, width)
    up = up.view(-1, width)
    out = torch.empty_like(gate)
    rows = gate.shape[0]

    block, warps = row_block(width)
    _gated_silu_fwd[(rows,)](gate, up, out, out.stride(0), width=width, BLOCK=block, num_warps=warps)
    return gate, up, out.view(*shape)


def gated_silu_backward(gate, up, dout):
    shape = dout.shape
    width = shape[-1]
    dout = dout.view(-1, width)
    rows = dout.shape[0]
    dgate = torch.empty_like(gate)
    dup = torch.empty_like(up)

    block, warps = row_block(width)
    _gated_silu_bwd[(rows,)](dout, gate, up, dgate, dup, dout.stride(0), width=width, BLOCK=block, num_warps=warps)
    return dgate.view(*shape), dup.view(*shape)


class GatedSiLU(torch.autograd.Function):
    @staticmethod
    @contiguous_args
    def forward(ctx, gate, up):
        gate, up, out = gated_silu_forward(gate, up)
        ctx.save_for_backward(gate, up)
        return out

    @staticmethod
    @contiguous_args
    def backward(ctx, dout):
        gate, up = ctx.saved_tensors
        return gated_silu_backward(gate, up, dout)
