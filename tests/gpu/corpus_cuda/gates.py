"""Gate specs for the CUDA corpus: each planted bug as a raw CUDA kernel (the .cu files here,
compiled with NVRTC through gg.cuda.load) and its correct twin. The dims, inputs, references
and tolerances are the Triton corpus's (tests/gpu/corpus_decls.py), so the two corpora answer
the same questions. Importing this module compiles and launches nothing."""
import sys
from pathlib import Path

import torch

import gpu_gate as gg

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # tests/gpu: the shared declarations
from corpus_decls import ATOMIC_TOLERANCE, declarations  # noqa: E402
import cu_kernels as K  # noqa: E402

D = declarations()


# --- a bf16 running sum -------------------------------------------------------------
@gg.spec(name="cu_rowsum_bf16_acc", **D.ROWSUM)
def rowsum_bug(x):
    return K.rowsum(x, acc_bf16=True)


@gg.spec(name="cu_rowsum_fp32_acc", **D.ROWSUM)
def rowsum_twin(x):
    return K.rowsum(x, acc_bf16=False)


# --- an embedding gradient that stores instead of adding --------------------------------
@gg.spec(name="cu_embedding_store", **D.EMBEDDING)
def embedding_bug(ids, weight):
    return K.EMBEDDING_STORE.apply(weight, ids)


@gg.spec(name="cu_embedding_atomic", tolerance=ATOMIC_TOLERANCE, **D.EMBEDDING)
def embedding_twin(ids, weight):
    return K.EMBEDDING_ATOMIC.apply(weight, ids)


# --- a layer norm whose variance counts the padding lanes --------------------------------
@gg.spec(name="cu_layernorm_padded_variance", **D.LAYERNORM)
def layernorm_bug(x):
    return K.layernorm(x, mask_padding=False)


@gg.spec(name="cu_layernorm_masked_variance", **D.LAYERNORM)
def layernorm_twin(x):
    return K.layernorm(x, mask_padding=True)


# --- an RMSNorm that ignores the row stride ------------------------------------------------


@gg.spec(name="cu_rmsnorm_packed_rows", **D.RMSNORM)
def rmsnorm_bug(x, w):
    return K.rmsnorm(x, w, use_stride=False)


@gg.spec(name="cu_rmsnorm_row_stride", **D.RMSNORM)
def rmsnorm_twin(x, w):
    return K.rmsnorm(x, w, use_stride=True)


# --- a kernel that skips the tail (its output comes from gg.empty: NaN-poisoned) -------------
@gg.spec(name="cu_bias_skips_tail", **D.BIAS)
def tail_bug(x, b):
    return K.bias(x, b, skip_tail=True)


@gg.spec(name="cu_bias_masks_tail", **D.BIAS)
def tail_twin(x, b):
    return K.bias(x, b, skip_tail=False)


# --- cheats around a GELU kernel ---------------------------------------------------------
_CACHE: dict = {}


@gg.spec(name="cu_gelu_cached", **D.GELU)
def gelu_cached(x):
    key = (tuple(x.shape), x.dtype)
    if key not in _CACHE:
        _CACHE[key] = K.gelu(x)
    return _CACHE[key]


@gg.spec(name="cu_gelu_writes_input", **D.GELU)
def gelu_writes_input(x):
    return K.gelu(x, mode="writes_input")


@gg.spec(name="cu_gelu_zeros", **D.GELU)
def gelu_zeros(x):
    return K.gelu(x, mode="zeros")


@gg.spec(name="cu_gelu", **D.GELU)
def gelu_twin(x):
    return K.gelu(x)


@gg.spec(name="cu_gelu_side_stream", devices=["cuda"], **D.GELU)
def gelu_side_stream(x):
    """Launched on a torch side stream passed as ``stream=`` (no stream switch), never waited for."""
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    return K.gelu(x, stream=side)


@gg.spec(name="cu_gelu_side_stream_cupy", devices=["cuda"], **D.GELU)
def gelu_side_stream_cupy(x):
    """The same on a CuPy stream: the launch is ordered after the input, the result is not."""
    import cupy

    torch.cuda.current_stream().synchronize()
    return K.gelu(x, stream=cupy.cuda.Stream(non_blocking=True))


@gg.spec(name="cu_gelu_cupy_current_stream", devices=["cuda"], **D.GELU)
def gelu_cupy_current_stream(x):
    """A raw CuPy launch on a CuPy stream made current (``with side:``), never waited for."""
    import cupy

    torch.cuda.current_stream().synchronize()
    with cupy.cuda.Stream(non_blocking=True):
        return K.gelu(x, through_cupy=True)


@gg.spec(name="cu_gelu_side_stream_ordered", devices=["cuda"], **D.GELU)
def gelu_side_stream_ordered(x):
    """The torch side stream, correctly ordered: the caller's stream waits for it."""
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    y = K.gelu(x, stream=side)
    torch.cuda.current_stream().wait_stream(side)
    y.record_stream(torch.cuda.current_stream())
    return y


# --- a softmax that yields NaN on an all -inf row ------------------------------------------
@gg.spec(name="cu_softmax_nan_rows", **D.SOFTMAX)
def softmax_bug(x):
    return K.softmax(x, guard=False)


@gg.spec(name="cu_softmax_guarded", **D.SOFTMAX)
def softmax_twin(x):
    return K.softmax(x, guard=True)


# --- a cross-entropy that rounds the true-class probability to bf16 ------------------------
@gg.spec(name="cu_cross_entropy_bf16_true_class", **D.CE)
def ce_bug(logits):
    return K.CE_ROUNDS.apply(logits, logits.argmax(-1))


@gg.spec(name="cu_cross_entropy_fp32_true_class", **D.CE)
def ce_twin(logits):
    return K.CE_EXACT.apply(logits, logits.argmax(-1))
