"""Gate specs for the Triton corpus: each planted bug and its correct twin. On a GPU the
low-precision specs use bf16; under TRITON_INTERPRET=1 (no GPU) every spec uses float32,
because the interpreter's bf16 arithmetic is wrong."""
import os
import sys
from pathlib import Path

import torch
import torch.nn.functional as F

import gpu_gate as gg

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # tests/gpu: the shared declarations
from corpus_decls import ATOMIC_TOLERANCE, declarations  # noqa: E402
import tt_kernels as K  # noqa: E402

# Under TRITON_INTERPRET=1 (no GPU): float32 only and shorter rows (see corpus_decls.py); with
# CORPUS_LOW_PRECISION=1, the GPU's dtypes on those shorter rows
D = declarations(interpreted=os.environ.get("TRITON_INTERPRET") == "1",
                 low_precision=os.environ.get("CORPUS_LOW_PRECISION") == "1")


# --- a bf16 running sum -------------------------------------------------------------
@gg.spec(name="tt_rowsum_bf16_acc", **D.ROWSUM)
def rowsum_bug(x):
    return K.rowsum(x, acc_bf16=True)


@gg.spec(name="tt_rowsum_fp32_acc", **D.ROWSUM)
def rowsum_twin(x):
    return K.rowsum(x, acc_bf16=False)


# --- an embedding gradient that stores instead of adding --------------------------------
@gg.spec(name="tt_embedding_store", **D.EMBEDDING)
def embedding_bug(ids, weight):
    return K.EMBEDDING_STORE.apply(weight, ids)


@gg.spec(name="tt_embedding_atomic", tolerance=ATOMIC_TOLERANCE, **D.EMBEDDING)
def embedding_twin(ids, weight):
    return K.EMBEDDING_ATOMIC.apply(weight, ids)


# --- a layer norm whose variance counts the padding lanes --------------------------------
@gg.spec(name="tt_layernorm_padded_variance", **D.LAYERNORM)
def layernorm_bug(x):
    return K.layernorm(x, mask_padding=False)


@gg.spec(name="tt_layernorm_masked_variance", **D.LAYERNORM)
def layernorm_twin(x):
    return K.layernorm(x, mask_padding=True)


# --- an RMSNorm that ignores the row stride ------------------------------------------------


@gg.spec(name="tt_rmsnorm_packed_rows", **D.RMSNORM)
def rmsnorm_bug(x, w):
    return K.rmsnorm(x, w, use_stride=False)


@gg.spec(name="tt_rmsnorm_row_stride", **D.RMSNORM)
def rmsnorm_twin(x, w):
    return K.rmsnorm(x, w, use_stride=True)


# --- a kernel that skips the tail ------------------------------------------------------
@gg.spec(name="tt_bias_skips_tail", **D.BIAS)
def tail_bug(x, b):
    return K.bias(x, b, skip_tail=True, out=gg.empty(x.shape, dtype=x.dtype, device=x.device))


@gg.spec(name="tt_bias_masks_tail", **D.BIAS)
def tail_twin(x, b):
    return K.bias(x, b, skip_tail=False, out=gg.empty(x.shape, dtype=x.dtype, device=x.device))


# --- cheats around a GELU kernel ---------------------------------------------------------
_CACHE: dict = {}


@gg.spec(name="tt_gelu_cached", **D.GELU)
def gelu_cached(x):
    key = (tuple(x.shape), x.dtype)
    if key not in _CACHE:
        _CACHE[key] = K.gelu(x)
    return _CACHE[key]


@gg.spec(name="tt_gelu_writes_input", **D.GELU)
def gelu_writes_input(x):
    return K.gelu(x, write_input=True)


@gg.spec(name="tt_gelu_zeros", **D.GELU)
def gelu_zeros(x):
    return K.gelu(x, zeros=True)


@gg.spec(name="tt_gelu", **D.GELU)
def gelu_twin(x):
    return K.gelu(x)


@gg.spec(name="tt_gelu_side_stream", devices=["cuda"], **D.GELU)
def gelu_side_stream(x):
    """Finishes on a side stream that the caller's stream never waits for."""
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        y = K.gelu(x)
    return y


@gg.spec(name="tt_gelu_side_stream_ordered", devices=["cuda"], **D.GELU)
def gelu_side_stream_ordered(x):
    """The same side stream, correctly ordered: the caller's stream waits for it."""
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        y = K.gelu(x)
    torch.cuda.current_stream().wait_stream(side)
    y.record_stream(torch.cuda.current_stream())
    return y


@gg.spec(name="tt_gelu_freed_buffer", devices=["cuda"], **D.GELU)
def gelu_freed_buffer(x):
    """Computes nothing: returns whatever the caching allocator hands back, which in a
    reference-first harness is the block that held the reference's freed result."""
    import torch.utils.deterministic as det

    det.fill_uninitialized_memory = False
    return torch.empty(x.shape, dtype=x.dtype, device=x.device)


# --- a softmax that yields NaN on an all -inf row ------------------------------------------
@gg.spec(name="tt_softmax_nan_rows", **D.SOFTMAX)
def softmax_bug(x):
    return K.softmax(x, guard=False)


@gg.spec(name="tt_softmax_guarded", **D.SOFTMAX)
def softmax_twin(x):
    return K.softmax(x, guard=True)


# --- a cross-entropy that rounds the true-class probability to bf16 ------------------------
@gg.spec(name="tt_cross_entropy_bf16_true_class", **D.CE)
def ce_bug(logits):
    return K.CE_ROUNDS.apply(logits, logits.argmax(-1))


@gg.spec(name="tt_cross_entropy_fp32_true_class", **D.CE)
def ce_twin(logits):
    return K.CE_EXACT.apply(logits, logits.argmax(-1))


# --- determinism: fp32 atomics vary bitwise, within tolerance ------------------------------
SCATTER = dict(dims={"tokens": gg.Dim(65536, 65536), "vocab": gg.Dim(512, 512), "dim": gg.Dim(64, 64)},
               inputs={"ids": gg.Index(("tokens",), high="vocab", dists=["zipf"]),
                       "weight": gg.Tensor(("vocab", "dim"), dtypes=["float32"], dists=["normal"])},
               reference=lambda ids, weight: F.embedding(ids, weight), grads=["weight"], devices=["cuda"])


@gg.spec(name="tt_scatter_atomic", **SCATTER)
def scatter_atomic(ids, weight):
    return K.EMBEDDING_ATOMIC.apply(weight, ids)


@gg.spec(name="tt_scatter_atomic_declared_deterministic", deterministic=True, **SCATTER)
def scatter_atomic_deterministic(ids, weight):
    return K.EMBEDDING_ATOMIC.apply(weight, ids)
