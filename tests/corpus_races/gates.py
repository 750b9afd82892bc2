"""Specs a careful user writes for the kernels of tt_locks.py: a layer-norm-style dW (the sum
over rows of dy * x) accumulated into GROUPS partial rows under spin locks, and an embedding
gradient scattered by token ids."""
import torch
import triton

import gpu_gate as gg
import tt_locks as K

GROUPS = 32

DW = dict(
    dims={"rows": gg.Dim(1, 16384, reduction=True), "cols": gg.Dim(1, 8192)},
    inputs={"dy": gg.Tensor(("rows", "cols"), dtypes=["float32"]), "x": gg.Tensor(("rows", "cols"), dtype="like:dy")},
    reference=lambda dy, x: (dy * x).sum(0),
)


def _partial_dw(kernel, dy, x):
    dy, x = dy.contiguous(), x.contiguous()
    rows, cols = x.shape
    partial = torch.zeros((GROUPS, cols), dtype=torch.float32, device=x.device)
    locks = torch.zeros((GROUPS,), dtype=torch.int32, device=x.device)
    kernel[(rows,)](dy, x, partial, locks, x.stride(0), cols, GROUPS=GROUPS, BLOCK=triton.next_power_of_2(cols))
    return partial.sum(0)


@gg.spec(name="dw_lock_no_barrier", **DW)
def dw_lock_no_barrier(dy, x):
    return _partial_dw(K.partial_dw_no_barrier, dy, x)


@gg.spec(name="dw_lock_barrier", **DW)
def dw_lock_barrier(dy, x):
    return _partial_dw(K.partial_dw_barrier, dy, x)


EMB = dict(
    dims={"tokens": gg.Dim(1, 65536), "vocab": gg.Dim(1, 32000), "dim": gg.Dim(1, 256)},
    inputs={"ids": gg.Index(("tokens",), high="vocab"), "g": gg.Tensor(("tokens", "dim"), dtypes=["float32"])},
    reference=lambda ids, g, vocab=None: torch.zeros((int(ids.max()) + 1, g.shape[1]), dtype=g.dtype,
                                                     device=g.device).index_add_(0, ids, g),
)


def _embedding_grad(kernel, ids, g):
    ids, g = ids.contiguous(), g.contiguous()
    gw = torch.zeros((int(ids.max()) + 1, g.shape[1]), dtype=g.dtype, device=g.device)
    kernel[(ids.numel(),)](ids, g, gw, g.shape[1], BLOCK=triton.next_power_of_2(g.shape[1]))
    return gw


@gg.spec(name="embedding_grad_store", **EMB)
def embedding_grad_store(ids, g):
    return _embedding_grad(K.embedding_grad_store, ids, g)


@gg.spec(name="embedding_grad_atomic", tolerance=gg.Tolerance(baseline_factor=4.0), **EMB)
def embedding_grad_atomic(ids, g):
    return _embedding_grad(K.embedding_grad_atomic, ids, g)
