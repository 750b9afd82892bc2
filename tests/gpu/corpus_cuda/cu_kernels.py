"""Launchers for the CUDA corpus: each planted bug next to its correct twin, compiled from the
``.cu`` files beside this module with NVRTC (``gg.cuda.load``) and launched on torch tensors.

Importing this module compiles and launches nothing: a kernel is compiled the first time it
is called (once per process). Each kernel exists once per dtype, named ``<base>_<f32|f16|bf16>``;
:data:`KERNELS` lists every name each file defines (the CPU test checks them, and the
parameters each launcher passes, against the PTX)."""
from __future__ import annotations

from pathlib import Path

import torch

import gpu_gate as gg

HERE = Path(__file__).resolve().parent  # resolved here: the harness's working directory is not this one
BLOCK = 256  # threads per block of the row kernels (a multiple of 32: the block reductions need whole warps)
CE_BLOCK = 1024  # cross-entropy rows are up to 32768 classes long
BIAS_TILE = 128  # CU_BIAS_TILE in bias.cu
MAX_GRID_Y = 65535

SUFFIX = {torch.float32: "f32", torch.float16: "f16", torch.bfloat16: "bf16"}


def _per_dtype(*bases: str) -> tuple[str, ...]:
    return tuple(f"{b}_{s}" for b in bases for s in SUFFIX.values())


KERNELS: dict[str, tuple[str, ...]] = {
    "rowsum.cu": _per_dtype("rowsum_bf16acc", "rowsum_fp32acc"),
    "embedding.cu": ("embedding_gather_f32", "embedding_grad_store_f32", "embedding_grad_atomic_f32"),
    "layernorm.cu": _per_dtype("layernorm_padded_var", "layernorm_masked_var"),
    "rmsnorm.cu": _per_dtype("rmsnorm_packed_rows", "rmsnorm_row_stride"),
    "bias.cu": _per_dtype("bias_no_tail", "bias_masked_tail"),
    "gelu.cu": _per_dtype("gelu", "gelu_writes_input", "gelu_zeros"),
    "softmax.cu": _per_dtype("softmax_unguarded", "softmax_guarded"),
    "cross_entropy.cu": _per_dtype("ce_forward", "ce_backward_bf16_true", "ce_backward_fp32_true"),
}


def kernel(file: str, base: str, dtype: torch.dtype):
    """The kernel ``<base>_<dtype suffix>`` of ``file`` (compiled on first use)."""
    name = f"{base}_{SUFFIX.get(dtype, str(dtype))}"
    if name not in KERNELS[file]:
        raise TypeError(f"{file} has no kernel {name!r}: {base} is not built for {dtype}")
    return gg.cuda.load(HERE / file, name)


def i32(v: int):
    return gg.cuda.int32(v)


def i64(v: int):
    return gg.cuda.int64(v)


def f32(v: float):
    return gg.cuda.float32(v)


def _threads(n: int, most: int = BLOCK) -> int:
    """Whole warps, enough for n columns, at most ``most``."""
    return max(32, min(most, -(-n // 32) * 32))


# --- a bf16 running sum ----------------------------------------------------------------------
def rowsum(x: torch.Tensor, acc_bf16: bool) -> torch.Tensor:
    rows, n = x.shape
    out = gg.empty((rows,), dtype=x.dtype, device=x.device)
    if rows and not n:
        return out.zero_()
    if rows:
        k = kernel("rowsum.cu", "rowsum_bf16acc" if acc_bf16 else "rowsum_fp32acc", x.dtype)
        k((rows,), (BLOCK,), x, out, i64(x.stride(0)), i64(x.stride(1)), i64(n))
    return out


# --- an embedding gradient that stores instead of adding -------------------------------------
def _embedding_function(atomic: bool) -> type:
    grad_kernel = "embedding_grad_atomic" if atomic else "embedding_grad_store"

    class Embedding(torch.autograd.Function):
        @staticmethod
        def forward(ctx, weight, ids):
            if ids.dtype != torch.int64 or ids.dim() != 1:
                raise TypeError(f"ids must be a 1-D int64 tensor, got {ids.dtype} of shape {tuple(ids.shape)}")
            (tokens,), (vocab, dim) = ids.shape, weight.shape
            out = gg.empty((tokens, dim), dtype=weight.dtype, device=weight.device)
            if tokens and dim:
                kernel("embedding.cu", "embedding_gather", weight.dtype)(
                    (tokens,), (_threads(dim),), ids, i64(ids.stride(0)), weight, i64(weight.stride(0)),
                    i64(weight.stride(1)), out, i64(dim))
            ctx.save_for_backward(ids)
            ctx.vocab = vocab
            return out

        @staticmethod
        def backward(ctx, grad_out):
            (ids,) = ctx.saved_tensors
            tokens, dim = grad_out.shape
            grad_weight = torch.zeros((ctx.vocab, dim), dtype=torch.float32, device=grad_out.device)
            if tokens and dim:
                kernel("embedding.cu", grad_kernel, grad_out.dtype)(
                    (tokens,), (_threads(dim),), ids, i64(ids.stride(0)), grad_out, i64(grad_out.stride(0)),
                    i64(grad_out.stride(1)), grad_weight, i64(dim))
            return grad_weight.to(grad_out.dtype), None

    return Embedding


EMBEDDING_STORE, EMBEDDING_ATOMIC = _embedding_function(False), _embedding_function(True)


# --- a layer norm whose variance counts the padding lanes --------------------------------------
def layernorm(x: torch.Tensor, mask_padding: bool, eps: float = 1e-5) -> torch.Tensor:
    rows, n = x.shape
    y = gg.empty((rows, n), dtype=x.dtype, device=x.device)
    if rows and n:
        padded = 1 << (n - 1).bit_length()  # the power-of-two tile the kernel walks
        k = kernel("layernorm.cu", "layernorm_masked_var" if mask_padding else "layernorm_padded_var", x.dtype)
        k((rows,), (BLOCK,), x, y, i64(x.stride(0)), i64(x.stride(1)), i32(n), i32(padded), f32(eps))
    return y


# --- an RMSNorm that ignores the row stride ------------------------------------------------------
def rmsnorm(x: torch.Tensor, w: torch.Tensor, use_stride: bool, eps: float = 1e-6) -> torch.Tensor:
    """The kernel reads rows with unit column stride: other layouts are copied first (a column
    slice of a wider tensor is not, and is where the packed-rows bug shows)."""
    if x.stride(-1) != 1:
        x = x.contiguous()
    rows, n = x.shape
    y = gg.empty((rows, n), dtype=x.dtype, device=x.device)
    if rows and n:
        k = kernel("rmsnorm.cu", "rmsnorm_row_stride" if use_stride else "rmsnorm_packed_rows", x.dtype)
        k((rows,), (BLOCK,), x, w, y, i64(x.stride(0)), i64(w.stride(0)), i32(n), f32(eps))
    return y


# --- a kernel that skips the tail ----------------------------------------------------------------
def bias(x: torch.Tensor, b: torch.Tensor, skip_tail: bool) -> torch.Tensor:
    rows, n = x.shape
    if rows > MAX_GRID_Y:
        raise ValueError(f"bias: {rows} rows is more than gridDim.y allows ({MAX_GRID_Y})")
    y = gg.empty((rows, n), dtype=x.dtype, device=x.device)  # NaN-poisoned in the harness
    tiles = n // BIAS_TILE if skip_tail else -(-n // BIAS_TILE)  # BUG when skip_tail: rounded down
    if rows and tiles:
        k = kernel("bias.cu", "bias_no_tail" if skip_tail else "bias_masked_tail", x.dtype)
        k((tiles, rows), (BIAS_TILE,), x, b, y, i64(x.stride(0)), i64(x.stride(1)), i64(b.stride(0)), i64(n))
    return y


# --- cheats around a GELU kernel -------------------------------------------------------------------
GELU_KERNELS = {"ok": "gelu", "writes_input": "gelu_writes_input", "zeros": "gelu_zeros"}


def gelu(x: torch.Tensor, mode: str = "ok", stream=None, through_cupy: bool = False) -> torch.Tensor:
    """``stream``: launch there (a torch or CuPy stream) instead of on torch's current stream.
    ``through_cupy``: launch through CuPy's RawKernel directly, as code written for CuPy does,
    which runs on CuPy's current stream, not torch's."""
    rows, n = x.shape
    y = gg.empty((rows, n), dtype=x.dtype, device=x.device)
    total = rows * n
    if total:
        blocks = min(-(-total // BLOCK), 8192)  # grid-stride beyond that
        k = kernel("gelu.cu", GELU_KERNELS[mode], x.dtype)
        args = (x, y, i64(x.stride(0)), i64(x.stride(1)), i64(rows), i64(n))
        if through_cupy:
            k.function((blocks,), (BLOCK,), tuple(gg.cuda.uint64(a.data_ptr()) if isinstance(a, torch.Tensor) else a
                                                  for a in args))
        else:
            k((blocks,), (BLOCK,), *args, stream=stream)
    return y


# --- a softmax that yields NaN on an all -inf row ---------------------------------------------------
def softmax(x: torch.Tensor, guard: bool) -> torch.Tensor:
    rows, n = x.shape
    y = gg.empty((rows, n), dtype=x.dtype, device=x.device)
    if rows and n:
        k = kernel("softmax.cu", "softmax_guarded" if guard else "softmax_unguarded", x.dtype)
        k((rows,), (BLOCK,), x, y, i64(x.stride(0)), i64(x.stride(1)), i32(n))
    return y


# --- a cross-entropy that rounds the true-class probability to bf16 ----------------------------------
def _ce_function(round_true: bool) -> type:
    backward_kernel = "ce_backward_bf16_true" if round_true else "ce_backward_fp32_true"

    class CrossEntropy(torch.autograd.Function):
        @staticmethod
        def forward(ctx, logits, labels):
            if labels.dtype != torch.int64 or labels.dim() != 1:
                raise TypeError(f"labels must be a 1-D int64 tensor, got {labels.dtype} of shape {tuple(labels.shape)}")
            rows, n = logits.shape
            loss = gg.empty((rows,), dtype=logits.dtype, device=logits.device)
            if rows and n:
                kernel("cross_entropy.cu", "ce_forward", logits.dtype)(
                    (rows,), (CE_BLOCK,), logits, i64(logits.stride(0)), i64(logits.stride(1)), labels,
                    i64(labels.stride(0)), loss, i32(n))
            ctx.save_for_backward(logits, labels)
            return loss

        @staticmethod
        def backward(ctx, grad_loss):
            logits, labels = ctx.saved_tensors
            rows, n = logits.shape
            grad = gg.empty((rows, n), dtype=logits.dtype, device=logits.device)
            if rows and n:
                kernel("cross_entropy.cu", backward_kernel, logits.dtype)(
                    (rows,), (CE_BLOCK,), logits, i64(logits.stride(0)), i64(logits.stride(1)), labels,
                    i64(labels.stride(0)), grad_loss, i64(grad_loss.stride(0)), grad, i32(n))
            return grad, None

    return CrossEntropy


CE_ROUNDS, CE_EXACT = _ce_function(True), _ce_function(False)
