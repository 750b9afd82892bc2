"""The layer-norm backward pattern: each program adds its row's partial dW into one of GROUPS
partial rows under a spin lock (tl.atomic_cas to take it, tl.atomic_xchg to release it).
Without a barrier between the stores and the release, the other threads' stores may still be
in flight when the next program takes the lock."""
import triton
import triton.language as tl


@triton.jit
def partial_dw_no_barrier(DY, X, DW, Lock, stride, n_cols, GROUPS: tl.constexpr, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    mask = cols < n_cols
    dw = tl.load(DY + row * stride + cols, mask=mask, other=0.0) * tl.load(X + row * stride + cols, mask=mask,
                                                                          other=0.0)
    group = row % GROUPS
    lock = Lock + group
    while tl.atomic_cas(lock, 0, 1) == 1:
        pass
    ptrs = DW + group * n_cols + cols
    tl.store(ptrs, tl.load(ptrs, mask=mask, other=0.0) + dw, mask=mask)
    tl.atomic_xchg(lock, 0)


@triton.jit
def partial_dw_barrier(DY, X, DW, Lock, stride, n_cols, GROUPS: tl.constexpr, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    mask = cols < n_cols
    dw = tl.load(DY + row * stride + cols, mask=mask, other=0.0) * tl.load(X + row * stride + cols, mask=mask,
                                                                          other=0.0)
    group = row % GROUPS
    lock = Lock + group
    while tl.atomic_cas(lock, 0, 1) == 1:
        pass
    ptrs = DW + group * n_cols + cols
    tl.store(ptrs, tl.load(ptrs, mask=mask, other=0.0) + dw, mask=mask)
    tl.debug_barrier()
    tl.atomic_xchg(lock, 0)


@triton.jit
def embedding_grad_store(IDS, G, GW, dim, BLOCK: tl.constexpr):
    i = tl.program_id(0)
    d = tl.arange(0, BLOCK)
    mask = d < dim
    row = tl.load(IDS + i)
    ptrs = GW + row * dim + d
    tl.store(ptrs, tl.load(ptrs, mask=mask, other=0.0) + tl.load(G + i * dim + d, mask=mask, other=0.0), mask=mask)


@triton.jit
def embedding_grad_atomic(IDS, G, GW, dim, BLOCK: tl.constexpr):
    i = tl.program_id(0)
    d = tl.arange(0, BLOCK)
    mask = d < dim
    row = tl.load(IDS + i)
    tl.atomic_add(GW + row * dim + d, tl.load(G + i * dim + d, mask=mask, other=0.0), mask=mask)
