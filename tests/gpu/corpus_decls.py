"""What the Triton and the CUDA planted-bug corpora declare: the dims, inputs, references and
tolerances of each bug/twin pair, shared so that both corpora ask the same questions.

``declarations(interpreted=True)`` is the Triton interpreter's variant (no GPU): float32
only, because the interpreter's bf16 arithmetic is wrong, and shorter rows, because it runs
about 1 ms per program."""
import math
from types import SimpleNamespace

import torch
import torch.nn.functional as F

import gpu_gate as gg
from gpu_gate.spec import upcast

# No zero-stride rows for RMSNorm: the bug would then read far past a one-row buffer, which on
# a GPU can fault and end the job instead of showing a mismatch (the sanitizer checks own that).
RMSNORM_LAYOUTS = ["contiguous", "transposed", "sliced", "narrowed", "offset"]

# fp32 atomics accumulate each hot row in whatever order the threads arrive: on an H100 that
# costs up to about 4x torch's (sorted, deterministic) summation error, which is correct
# behaviour for such a kernel, so its spec declares a wider factor than the default 2.
ATOMIC_TOLERANCE = gg.Tolerance(baseline_factor=8.0)


def gelu_reference(x):
    y = upcast(x)
    return (0.5 * y * (1 + torch.tanh(math.sqrt(2 / math.pi) * (y + 0.044715 * y.pow(3))))).to(x.dtype)


def masked_softmax(x):
    y = upcast(x)
    m = y.amax(-1, keepdim=True)
    m = torch.where(torch.isinf(m), torch.zeros_like(m), m)
    e = torch.exp(y - m)
    s = e.sum(-1, keepdim=True)
    return torch.where(s > 0, e / s, torch.zeros_like(e)).to(x.dtype)


def ce_reference(logits):
    return F.cross_entropy(upcast(logits), logits.argmax(-1), reduction="none").to(logits.dtype)


def rmsnorm_reference(x, w):
    y = upcast(x)
    return (y * torch.rsqrt(y.pow(2).mean(-1, keepdim=True) + 1e-6) * upcast(w)).to(x.dtype)


def declarations(interpreted: bool = False, low_precision: bool = False) -> SimpleNamespace:
    """``low_precision``: under the interpreter too, the GPU's dtypes (bfloat16 and float16), as the
    interpreter's adaptations run them (tests/worker/test_interpreter_low_precision_corpus.py)."""
    low = ["float32"] if interpreted and not low_precision else ["bfloat16"]
    half = ["float32"] if interpreted and not low_precision else ["float32", "float16", "bfloat16"]
    long = 1 << 14 if interpreted and not low_precision else 1 << 18
    return SimpleNamespace(
        ROWSUM=dict(dims={"rows": gg.Dim(1, 8), "n": gg.Dim(1, long, reduction=True)},
                    inputs={"x": gg.Tensor(("rows", "n"), dtypes=low)}, reference=lambda x: x.sum(-1)),
        EMBEDDING=dict(dims={"tokens": gg.Dim(1, 4096), "vocab": gg.Dim(1, 512), "dim": gg.Dim(1, 64)},
                       inputs={"ids": gg.Index(("tokens",), high="vocab"),
                               "weight": gg.Tensor(("vocab", "dim"), dtypes=["float32"])},
                       reference=lambda ids, weight: F.embedding(ids, weight), grads=["weight"]),
        LAYERNORM=dict(dims={"rows": gg.Dim(1, 64), "cols": gg.Dim(1, 4096)},
                       inputs={"x": gg.Tensor(("rows", "cols"), dtypes=half)},
                       reference=lambda x: F.layer_norm(upcast(x), x.shape[-1:], eps=1e-5).to(x.dtype)),
        RMSNORM=dict(dims={"rows": gg.Dim(1, 64), "hidden": gg.Dim(1, 4096)},
                     inputs={"x": gg.Tensor(("rows", "hidden"), dtypes=half, layouts=RMSNORM_LAYOUTS),
                             "w": gg.Tensor(("hidden",), dtype="like:x")},
                     reference=rmsnorm_reference),
        BIAS=dict(dims={"rows": gg.Dim(1, 32), "n": gg.Dim(1, 4096)},
                  inputs={"x": gg.Tensor(("rows", "n"), dtypes=half), "b": gg.Tensor(("n",), dtype="like:x")},
                  reference=lambda x, b: (upcast(x) * 0.5 + upcast(b)).to(x.dtype)),
        GELU=dict(dims={"rows": gg.Dim(1, 64), "n": gg.Dim(1, 4096)},
                  inputs={"x": gg.Tensor(("rows", "n"), dtypes=half)}, reference=gelu_reference),
        SOFTMAX=dict(dims={"rows": gg.Dim(1, 64), "n": gg.Dim(1, 4096)},
                     inputs={"x": gg.Tensor(("rows", "n"), dtypes=half,
                                            dists=["neg_inf_spans", "normal", "peaked"])},
                     reference=masked_softmax),
        CE=dict(dims={"rows": gg.Dim(1, 16), "classes": gg.Dim(2, 8192 if interpreted else 32768)},
                inputs={"logits": gg.Tensor(("rows", "classes"), dtypes=low, dists=["peaked"])},
                reference=ce_reference, grads=["logits"]),
    )
