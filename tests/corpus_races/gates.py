"""Specs a careful user writes for the kernels of tt_locks.py: a layer-norm-style dW (the sum
over rows of dy * x) accumulated into GROUPS partial rows under spin locks, an embedding
gradient scattered by token ids, and an RMSNorm (tt_pdl.py) whose input the previous layer's
kernel writes just before it runs."""
import torch
import triton

import gpu_gate as gg
import tt_locks as K
import tt_pdl as K_PDL
import tt_launched as K_LAUNCHED

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


# An RMSNorm whose input is the previous layer's output (producer=["x"]): launched with
# programmatic dependent launch, or on a stream of the wrapper's own.
RMS = dict(
    dims={"rows": gg.Dim(1, 4096), "cols": gg.Dim(1, 8192, reduction=True)},
    inputs={"x": gg.Tensor(("rows", "cols"), dtypes=["float32", "bfloat16"]), "w": gg.Tensor(("cols",), dtype="like:x")},
    reference=lambda x, w: (x.float() * torch.rsqrt(x.float().pow(2).mean(-1, keepdim=True) + 1e-6) * w.float()
                            ).to(x.dtype),
    producer=["x"],
)


def _rms(kernel, x, w, pdl=True):
    x, w = x.contiguous(), w.contiguous()
    y = torch.empty_like(x)
    rows, cols = x.shape
    kernel[(rows,)](x, w, y, x.stride(0), cols, 1e-6, BLOCK=triton.next_power_of_2(cols), launch_pdl=pdl)
    return y


@gg.spec(name="rms_pdl_reads_early", **RMS)
def rms_pdl_reads_early(x, w):
    return _rms(K_PDL.rms_norm_reads_early, x, w)


@gg.spec(name="rms_pdl_waits", **RMS)
def rms_pdl_waits(x, w):
    return _rms(K_PDL.rms_norm_waits, x, w)


@gg.spec(name="rms_pdl_waits_unproduced", **{k: v for k, v in RMS.items() if k != "producer"})
def rms_pdl_waits_unproduced(x, w):
    """The same, its spec without producer=: what the runs after a producer cost."""
    return _rms(K_PDL.rms_norm_waits, x, w)


def _on_own_stream(x, w, wait):
    side = torch.cuda.Stream()
    if wait:
        side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        y = _rms(K_PDL.rms_norm_waits, x, w, pdl=False)
    torch.cuda.current_stream().wait_stream(side)
    y.record_stream(torch.cuda.current_stream())
    return y


@gg.spec(name="rms_own_stream_unordered", **RMS)
def rms_own_stream_unordered(x, w):
    """Its own stream, which never waits for the caller's: reads x whenever it gets to it."""
    return _on_own_stream(x, w, wait=False)


@gg.spec(name="rms_own_stream_ordered", **RMS)
def rms_own_stream_ordered(x, w):
    return _on_own_stream(x, w, wait=True)


# A GELU computed in two steps on two streams: the caller's stream writes the tanh term, a stream
# of the wrapper's own multiplies by it. Unordered, the second step reads the first's buffer
# whenever it gets to it: right as long as the other stream is the slower one.
GELU = dict(
    dims={"n": gg.Dim(1, 1 << 20)},
    inputs={"x": gg.Tensor(("n",), dtypes=["float32"])},
    reference=lambda x: torch.nn.functional.gelu(x, approximate="tanh"),
)


def _two_streams(x, wait):
    inner = torch.tanh(0.7978845608028654 * (x + 0.044715 * x * x * x))  # on the caller's stream
    side = torch.cuda.Stream()
    if wait:
        side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        y = 0.5 * x * (1.0 + inner)
    torch.cuda.current_stream().wait_stream(side)
    y.record_stream(torch.cuda.current_stream())
    inner.record_stream(side)
    return y


@gg.spec(name="gelu_streams_unordered", **GELU)
def gelu_streams_unordered(x):
    return _two_streams(x, wait=False)


@gg.spec(name="gelu_streams_ordered", **GELU)
def gelu_streams_ordered(x):
    return _two_streams(x, wait=True)


# A split row sum behind ready flags (tt_launched.py): every constexpr comes from the call site.
SPLIT = dict(
    dims={"rows": gg.Dim(1, 64), "n": gg.Dim(1, 8192, reduction=True)},
    inputs={"x": gg.Tensor(("rows", "n"), dtypes=["float32"])},
    reference=lambda x: x.sum(-1),
)


@gg.spec(name="split_rows_flag_store", **SPLIT)
def split_rows_flag_store(x):
    return K_LAUNCHED.split_row_sum(K_LAUNCHED.split_rows_flag_store, x)


@gg.spec(name="split_rows_flag_release", **SPLIT)
def split_rows_flag_release(x):
    return K_LAUNCHED.split_row_sum(K_LAUNCHED.split_rows_flag_release, x)
