"""Liger-Kernel's RMSNorm, forward and backward, as Hugging Face models call it through
``LigerRMSNorm``: Llama's casting (only the inverse RMS in float32; the weight multiplies in the
input's dtype) and Gemma's (everything in float32, the weight offset by 1).

The references are Hugging Face's own RMSNorm modules (LlamaRMSNorm, GemmaRMSNorm), in plain torch.
``in_place=False`` keeps the upstream gradient intact (the Gemma 2 patch passes it; the default,
True, writes dX into dY, which only a caller that never reads dY again may allow).
"""
import torch

import gpu_gate as gg
from gpu_gate.spec import upcast
from liger_kernel.ops.rms_norm import LigerRMSNormFunction

EPS = 1e-6


def llama_rms_norm(x, w):
    h = upcast(x)
    h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + EPS)
    return w * h.to(x.dtype)


def gemma_rms_norm(x, w):
    h = upcast(x)
    h = h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + EPS)
    return (h * (1.0 + upcast(w))).to(x.dtype)


DIMS = {"rows": gg.Dim(1, 4096), "hidden": gg.Dim(1, 16384, reduction=True)}
INPUTS = {"x": gg.Tensor(("rows", "hidden"), dtypes=["float32", "bfloat16", "float16"]),
          "w": gg.Tensor(("hidden",), dtype="like:x")}


@gg.spec(dims=DIMS, inputs=INPUTS, reference=llama_rms_norm, grads=["x", "w"])
def rms_norm_llama_gate(x, w):
    return LigerRMSNormFunction.apply(x, w, EPS, 0.0, "llama", False)


@gg.spec(dims=DIMS, inputs=INPUTS, reference=gemma_rms_norm, grads=["x", "w"])
def rms_norm_gemma_gate(x, w):
    return LigerRMSNormFunction.apply(x, w, EPS, 1.0, "gemma", False)
