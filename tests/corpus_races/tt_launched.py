"""A split row sum whose programs publish their partials behind ready flags, with every constexpr
chosen at the call site (``BLOCK=triton.next_power_of_2(...)``, ``SPLITS`` from the row length):
the compile check, reading this file alone, knows no values for them and cannot build the kernels;
the cases launch them. Each program writes its partial sum and raises its flag; the last program
waits for every flag, then adds the partials up (the last one: the interpreter runs the programs in
order, and on a GPU it is the one most likely to find the others done). Raised with a plain store
right after the partials, a waiting program may see a flag before the partial lands; the twin puts
a barrier and a releasing exchange there."""
import torch
import triton
import triton.language as tl


@triton.jit
def split_rows_flag_store(X, Partial, Ready, Out, n, stride, SPLITS: tl.constexpr, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    part = tl.program_id(1)
    offs = part * BLOCK + tl.arange(0, BLOCK)
    x = tl.load(X + row * stride + offs, mask=offs < n, other=0.0)
    tl.store(Partial + row * SPLITS + part, tl.sum(x, axis=0))
    tl.store(Ready + row * SPLITS + part, 1)
    if part == SPLITS - 1:
        total = 0.0
        for p in range(SPLITS):
            while tl.load(Ready + row * SPLITS + p, volatile=True) == 0:
                pass
            total += tl.load(Partial + row * SPLITS + p)
        tl.store(Out + row, total)


@triton.jit
def split_rows_flag_release(X, Partial, Ready, Out, n, stride, SPLITS: tl.constexpr, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    part = tl.program_id(1)
    offs = part * BLOCK + tl.arange(0, BLOCK)
    x = tl.load(X + row * stride + offs, mask=offs < n, other=0.0)
    tl.store(Partial + row * SPLITS + part, tl.sum(x, axis=0))
    tl.debug_barrier()
    tl.atomic_xchg(Ready + row * SPLITS + part, 1)
    if part == SPLITS - 1:
        total = 0.0
        for p in range(SPLITS):
            while tl.load(Ready + row * SPLITS + p, volatile=True) == 0:
                pass
            total += tl.load(Partial + row * SPLITS + p)
        tl.store(Out + row, total)


def split_row_sum(kernel, x):
    x = x.contiguous()
    rows, n = x.shape
    block = min(1024, triton.next_power_of_2(n))
    splits = triton.cdiv(n, block)
    partial = torch.empty((rows, splits), dtype=torch.float32, device=x.device)
    ready = torch.zeros((rows, splits), dtype=torch.int32, device=x.device)
    out = torch.empty((rows,), dtype=torch.float32, device=x.device)
    kernel[(rows, splits)](x, partial, ready, out, n, x.stride(0), SPLITS=splits, BLOCK=block)
    return out
