"""Gate specs for the CUDA corpus: each planted bug as a raw CUDA kernel (the .cu files here,
compiled with NVRTC through gg.cuda.load) and its correct twin. The dims, inputs, references
and tolerances are those of the Triton corpus (tests/gpu/corpus_triton/gates.py), so the two
corpora answer the same questions. Importing this module compiles and launches nothing."""
import math

import torch
import torch.nn.functional as F

import gpu_gate as gg
from gpu_gate.spec import upcast
import cu_kernels as K

LOW = ["bfloat16"]
HALF = ["float32", "float16", "bfloat16"]
LONG = 1 << 18

# --- a bf16 running sum -------------------------------------------------------------
ROWSUM = dict(dims={"rows": gg.Dim(1, 8), "n": gg.Dim(1, LONG, reduction=True)},
              inputs={"x": gg.Tensor(("rows", "n"), dtypes=LOW)}, reference=lambda x: x.sum(-1))


@gg.spec(name="cu_rowsum_bf16_acc", **ROWSUM)
def rowsum_bug(x):
    return K.rowsum(x, acc_bf16=True)


@gg.spec(name="cu_rowsum_fp32_acc", **ROWSUM)
def rowsum_twin(x):
    return K.rowsum(x, acc_bf16=False)


# --- an embedding gradient that stores instead of adding --------------------------------
EMBEDDING = dict(dims={"tokens": gg.Dim(1, 4096), "vocab": gg.Dim(1, 512), "dim": gg.Dim(1, 64)},
                 inputs={"ids": gg.Index(("tokens",), high="vocab"),
                         "weight": gg.Tensor(("vocab", "dim"), dtypes=["float32"])},
                 reference=lambda ids, weight: F.embedding(ids, weight), grads=["weight"])


@gg.spec(name="cu_embedding_store", **EMBEDDING)
def embedding_bug(ids, weight):
    return K.EMBEDDING_STORE.apply(weight, ids)


# fp32 atomics accumulate each hot row in whatever order the threads arrive, which costs a few
# times torch's (sorted, deterministic) summation error: correct behaviour for this kernel, so
# the spec declares a wider factor than the default 2 (as the Triton twin does).
@gg.spec(name="cu_embedding_atomic", tolerance=gg.Tolerance(baseline_factor=8.0), **EMBEDDING)
def embedding_twin(ids, weight):
    return K.EMBEDDING_ATOMIC.apply(weight, ids)


# --- a layer norm whose variance counts the padding lanes --------------------------------
LAYERNORM = dict(dims={"rows": gg.Dim(1, 64), "cols": gg.Dim(1, 4096)},
                 inputs={"x": gg.Tensor(("rows", "cols"), dtypes=HALF)},
                 reference=lambda x: F.layer_norm(upcast(x), x.shape[-1:], eps=1e-5).to(x.dtype))


@gg.spec(name="cu_layernorm_padded_variance", **LAYERNORM)
def layernorm_bug(x):
    return K.layernorm(x, mask_padding=False)


@gg.spec(name="cu_layernorm_masked_variance", **LAYERNORM)
def layernorm_twin(x):
    return K.layernorm(x, mask_padding=True)


# --- an RMSNorm that ignores the row stride ------------------------------------------------
# No zero-stride rows: the bug would then read far past a one-row buffer, which on a GPU can
# fault and end the job instead of showing a mismatch (the sanitizer checks own that case).
RMSNORM_LAYOUTS = ["contiguous", "transposed", "sliced", "narrowed", "offset"]
RMSNORM = dict(dims={"rows": gg.Dim(1, 64), "hidden": gg.Dim(1, 4096)},
               inputs={"x": gg.Tensor(("rows", "hidden"), dtypes=HALF, layouts=RMSNORM_LAYOUTS),
                       "w": gg.Tensor(("hidden",), dtype="like:x")},
               reference=lambda x, w: (upcast(x) * torch.rsqrt(upcast(x).pow(2).mean(-1, keepdim=True) + 1e-6)
                                       * upcast(w)).to(x.dtype))


@gg.spec(name="cu_rmsnorm_packed_rows", **RMSNORM)
def rmsnorm_bug(x, w):
    return K.rmsnorm(x, w, use_stride=False)


@gg.spec(name="cu_rmsnorm_row_stride", **RMSNORM)
def rmsnorm_twin(x, w):
    return K.rmsnorm(x, w, use_stride=True)


# --- a kernel that skips the tail (its output comes from gg.empty: NaN-poisoned) -------------
BIAS = dict(dims={"rows": gg.Dim(1, 32), "n": gg.Dim(1, 4096)},
            inputs={"x": gg.Tensor(("rows", "n"), dtypes=HALF), "b": gg.Tensor(("n",), dtype="like:x")},
            reference=lambda x, b: (upcast(x) * 0.5 + upcast(b)).to(x.dtype))


@gg.spec(name="cu_bias_skips_tail", **BIAS)
def tail_bug(x, b):
    return K.bias(x, b, skip_tail=True)


@gg.spec(name="cu_bias_masks_tail", **BIAS)
def tail_twin(x, b):
    return K.bias(x, b, skip_tail=False)


# --- cheats around a GELU kernel ---------------------------------------------------------
def gelu_reference(x):
    y = upcast(x)
    return (0.5 * y * (1 + torch.tanh(math.sqrt(2 / math.pi) * (y + 0.044715 * y.pow(3))))).to(x.dtype)


GELU = dict(dims={"rows": gg.Dim(1, 64), "n": gg.Dim(1, 4096)},
            inputs={"x": gg.Tensor(("rows", "n"), dtypes=HALF)}, reference=gelu_reference)
_CACHE: dict = {}


@gg.spec(name="cu_gelu_cached", **GELU)
def gelu_cached(x):
    key = (tuple(x.shape), x.dtype)
    if key not in _CACHE:
        _CACHE[key] = K.gelu(x)
    return _CACHE[key]


@gg.spec(name="cu_gelu_writes_input", **GELU)
def gelu_writes_input(x):
    return K.gelu(x, mode="writes_input")


@gg.spec(name="cu_gelu_zeros", **GELU)
def gelu_zeros(x):
    return K.gelu(x, mode="zeros")


@gg.spec(name="cu_gelu", **GELU)
def gelu_twin(x):
    return K.gelu(x)


# --- a softmax that yields NaN on an all -inf row ------------------------------------------
def masked_softmax(x):
    y = upcast(x)
    m = y.amax(-1, keepdim=True)
    m = torch.where(torch.isinf(m), torch.zeros_like(m), m)
    e = torch.exp(y - m)
    s = e.sum(-1, keepdim=True)
    return torch.where(s > 0, e / s, torch.zeros_like(e)).to(x.dtype)


SOFTMAX = dict(dims={"rows": gg.Dim(1, 64), "n": gg.Dim(1, 4096)},
               inputs={"x": gg.Tensor(("rows", "n"), dtypes=HALF, dists=["neg_inf_spans", "normal", "peaked"])},
               reference=masked_softmax)


@gg.spec(name="cu_softmax_nan_rows", **SOFTMAX)
def softmax_bug(x):
    return K.softmax(x, guard=False)


@gg.spec(name="cu_softmax_guarded", **SOFTMAX)
def softmax_twin(x):
    return K.softmax(x, guard=True)


# --- a cross-entropy that rounds the true-class probability to bf16 ------------------------
def ce_reference(logits):
    return F.cross_entropy(upcast(logits), logits.argmax(-1), reduction="none").to(logits.dtype)


CE = dict(dims={"rows": gg.Dim(1, 16), "classes": gg.Dim(2, 32768)},
          inputs={"logits": gg.Tensor(("rows", "classes"), dtypes=LOW, dists=["peaked"])},
          reference=ce_reference, grads=["logits"])


@gg.spec(name="cu_cross_entropy_bf16_true_class", **CE)
def ce_bug(logits):
    return K.CE_ROUNDS.apply(logits, logits.argmax(-1))


@gg.spec(name="cu_cross_entropy_fp32_true_class", **CE)
def ce_twin(logits):
    return K.CE_EXACT.apply(logits, logits.argmax(-1))
