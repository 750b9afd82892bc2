"""Triton kernels for the GPU corpus: each planted bug next to its correct twin, selected
by a constexpr flag so both compile from the same source. Every kernel also runs under
TRITON_INTERPRET=1 in float32 (the CPU test does that)."""
import torch
import triton
import triton.language as tl


@triton.jit
def rowsum_kernel(x_ptr, out_ptr, stride_row, stride_col, n, BLOCK: tl.constexpr, ACC_BF16: tl.constexpr):
    row = tl.program_id(0)
    acc = tl.sum(tl.zeros([BLOCK], dtype=tl.float32), axis=0)
    for start in range(0, n, BLOCK):
        cols = start + tl.arange(0, BLOCK)
        x = tl.load(x_ptr + row * stride_row + cols * stride_col, mask=cols < n, other=0.0).to(tl.float32)
        part = tl.sum(x, axis=0)
        if ACC_BF16:
            acc = (acc + part).to(tl.bfloat16).to(tl.float32)  # BUG: a bf16 running sum
        else:
            acc = acc + part
    tl.store(out_ptr + row, acc.to(out_ptr.dtype.element_ty))


def rowsum(x: torch.Tensor, acc_bf16: bool) -> torch.Tensor:
    rows, n = x.shape
    out = torch.empty((rows,), dtype=x.dtype, device=x.device)
    rowsum_kernel[(rows,)](x, out, x.stride(0), x.stride(1), n, BLOCK=128, ACC_BF16=acc_bf16)
    return out


@triton.jit
def embedding_grad_kernel(ids_ptr, g_ptr, gw_ptr, dim, stride_g, BLOCK: tl.constexpr, ATOMIC: tl.constexpr):
    tok = tl.program_id(0)
    idx = tl.load(ids_ptr + tok)
    cols = tl.arange(0, BLOCK)
    mask = cols < dim
    g = tl.load(g_ptr + tok * stride_g + cols, mask=mask, other=0.0).to(tl.float32)
    if ATOMIC:
        tl.atomic_add(gw_ptr + idx * dim + cols, g, mask=mask)
    else:
        tl.store(gw_ptr + idx * dim + cols, g, mask=mask)  # BUG: duplicate ids overwrite each other


def _embedding_function(atomic: bool) -> type:
    class Embedding(torch.autograd.Function):
        @staticmethod
        def forward(ctx, weight, ids):
            ctx.save_for_backward(ids)
            ctx.vocab = weight.shape[0]
            return weight.index_select(0, ids)

        @staticmethod
        def backward(ctx, grad_out):
            (ids,) = ctx.saved_tensors
            ids = ids.contiguous()
            g = grad_out.contiguous()
            dim = g.shape[1]
            gw = torch.zeros((ctx.vocab, dim), dtype=torch.float32, device=g.device)
            if ids.numel():
                embedding_grad_kernel[(ids.numel(),)](ids, g, gw, dim, g.stride(0),
                                                      BLOCK=triton.next_power_of_2(dim), ATOMIC=atomic)
            return gw.to(grad_out.dtype), None

    return Embedding


EMBEDDING_STORE, EMBEDDING_ATOMIC = _embedding_function(False), _embedding_function(True)


@triton.jit
def layernorm_kernel(x_ptr, y_ptr, stride_row, n, eps, BLOCK: tl.constexpr, MASK_PADDING: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    mask = cols < n
    x = tl.load(x_ptr + row * stride_row + cols, mask=mask, other=0.0).to(tl.float32)
    mean = tl.sum(x, axis=0) / n
    xc = x - mean
    if MASK_PADDING:
        xc = tl.where(mask, xc, 0.0)
    var = tl.sum(xc * xc, axis=0) / n  # BUG without the mask: every padding lane adds mean^2
    y = (x - mean) * tl.rsqrt(var + eps)
    tl.store(y_ptr + row * n + cols, y.to(y_ptr.dtype.element_ty), mask=mask)


def layernorm(x: torch.Tensor, mask_padding: bool) -> torch.Tensor:
    x = x.contiguous()
    rows, n = x.shape
    y = torch.empty((rows, n), dtype=x.dtype, device=x.device)
    layernorm_kernel[(rows,)](x, y, x.stride(0), n, 1e-5, BLOCK=triton.next_power_of_2(n),
                              MASK_PADDING=mask_padding)
    return y


@triton.jit
def rmsnorm_kernel(x_ptr, w_ptr, y_ptr, stride_row, n, eps, BLOCK: tl.constexpr, USE_STRIDE: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    mask = cols < n
    if USE_STRIDE:
        start = row * stride_row
    else:
        start = row * n  # BUG: assumes packed rows
    x = tl.load(x_ptr + start + cols, mask=mask, other=0.0).to(tl.float32)
    w = tl.load(w_ptr + cols, mask=mask, other=0.0).to(tl.float32)
    ms = tl.sum(x * x, axis=0) / n
    y = x * tl.rsqrt(ms + eps) * w
    tl.store(y_ptr + row * n + cols, y.to(y_ptr.dtype.element_ty), mask=mask)


def rmsnorm(x: torch.Tensor, w: torch.Tensor, use_stride: bool) -> torch.Tensor:
    if x.stride(-1) != 1:
        x = x.contiguous()
    w = w.contiguous()
    rows, n = x.shape
    y = torch.empty((rows, n), dtype=x.dtype, device=x.device)
    rmsnorm_kernel[(rows,)](x, w, y, x.stride(0), n, 1e-6, BLOCK=triton.next_power_of_2(n), USE_STRIDE=use_stride)
    return y


@triton.jit
def bias_kernel(x_ptr, b_ptr, y_ptr, n, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)
    mask = cols < n
    x = tl.load(x_ptr + row * n + cols, mask=mask, other=0.0).to(tl.float32)
    b = tl.load(b_ptr + cols, mask=mask, other=0.0).to(tl.float32)
    tl.store(y_ptr + row * n + cols, (x * 0.5 + b).to(y_ptr.dtype.element_ty), mask=mask)


def bias(x: torch.Tensor, b: torch.Tensor, skip_tail: bool, out: torch.Tensor) -> torch.Tensor:
    x, b = x.contiguous(), b.contiguous()
    rows, n = x.shape
    blocks = n // 128 if skip_tail else triton.cdiv(n, 128)  # BUG when skip_tail: the tail is never written
    if rows and blocks:
        bias_kernel[(rows, blocks)](x, b, out, n, BLOCK=128)
    return out


@triton.jit
def gelu_kernel(x_ptr, y_ptr, n, BLOCK: tl.constexpr, ZEROS: tl.constexpr, WRITE_INPUT: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask, other=0.0).to(tl.float32)
    inner = 0.7978845608028654 * (x + 0.044715 * x * x * x)
    t = 2.0 / (1.0 + tl.exp(-2.0 * inner)) - 1.0  # tanh
    y = 0.5 * x * (1.0 + t)
    if ZEROS:
        y = y * 0.0  # BUG: writes zeros
    tl.store(y_ptr + offs, y.to(y_ptr.dtype.element_ty), mask=mask)
    if WRITE_INPUT:
        tl.store(x_ptr + offs, y.to(x_ptr.dtype.element_ty), mask=mask)  # BUG: the input is scratch


def gelu(x: torch.Tensor, zeros: bool = False, write_input: bool = False) -> torch.Tensor:
    src = x if x.is_contiguous() else x.contiguous()
    y = torch.empty_like(src)
    n = src.numel()
    if n:
        gelu_kernel[(triton.cdiv(n, 1024),)](src, y, n, BLOCK=1024, ZEROS=zeros, WRITE_INPUT=write_input)
    if write_input and src is not x:
        x.copy_(src)
    return y


@triton.jit
def softmax_kernel(x_ptr, y_ptr, stride_row, n, BLOCK: tl.constexpr, GUARD: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    mask = cols < n
    x = tl.load(x_ptr + row * stride_row + cols, mask=mask, other=-float("inf")).to(tl.float32)
    m = tl.max(x, axis=0)
    if GUARD:
        m = tl.where(m == -float("inf"), 0.0, m)
    e = tl.exp(x - m)  # BUG without the guard: -inf - (-inf) is NaN on an all -inf row
    s = tl.sum(e, axis=0)
    if GUARD:
        y = tl.where(s > 0, e / s, 0.0)
    else:
        y = e / s
    tl.store(y_ptr + row * n + cols, y.to(y_ptr.dtype.element_ty), mask=mask)


def softmax(x: torch.Tensor, guard: bool) -> torch.Tensor:
    if x.stride(-1) != 1:
        x = x.contiguous()
    rows, n = x.shape
    y = torch.empty((rows, n), dtype=x.dtype, device=x.device)
    softmax_kernel[(rows,)](x, y, x.stride(0), n, BLOCK=triton.next_power_of_2(n), GUARD=guard)
    return y


@triton.jit
def ce_forward_kernel(x_ptr, labels_ptr, loss_ptr, n, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    x = tl.load(x_ptr + row * n + cols, mask=cols < n, other=-float("inf")).to(tl.float32)
    label = tl.load(labels_ptr + row)
    m = tl.max(x, axis=0)
    e = tl.exp(x - m)
    x_label = tl.sum(tl.where(cols == label, x - m, 0.0), axis=0)
    rest = tl.sum(tl.where(cols == label, 0.0, e), axis=0)
    # When the label is the maximum, lse = log(1 + rest): with a near-certain prediction rest is
    # tiny and log(1.0000069) in fp32 loses most of its digits, so use the series of log1p.
    log1p_rest = rest - rest * rest * 0.5 + rest * rest * rest * (1.0 / 3.0)
    lse = tl.where((x_label == 0.0) & (rest < 1e-3), log1p_rest, tl.log(tl.exp(x_label) + rest))
    tl.store(loss_ptr + row, (lse - x_label).to(loss_ptr.dtype.element_ty))


@triton.jit
def ce_backward_kernel(x_ptr, labels_ptr, gloss_ptr, gx_ptr, n, BLOCK: tl.constexpr, ROUND_TRUE: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    mask = cols < n
    x = tl.load(x_ptr + row * n + cols, mask=mask, other=-float("inf")).to(tl.float32)
    label = tl.load(labels_ptr + row)
    g = tl.load(gloss_ptr + row).to(tl.float32)
    m = tl.max(x, axis=0)
    e = tl.exp(x - m)
    s = tl.sum(e, axis=0)
    p = e / s
    if ROUND_TRUE:
        p_true = tl.sum(tl.where(cols == label, p, 0.0), axis=0)
        p_true = p_true.to(tl.bfloat16).to(tl.float32)  # BUG: rounded before p - 1
        true_grad = p_true - 1.0
    else:
        # p_true - 1 is -(the other classes' mass) / s: computed so, it keeps its digits when
        # the prediction is near-certain and p_true - 1 would cancel to a few ulps
        rest = tl.sum(tl.where(cols == label, 0.0, e), axis=0)
        true_grad = -rest / s
    grad = tl.where(cols == label, true_grad, p) * g
    tl.store(gx_ptr + row * n + cols, grad.to(gx_ptr.dtype.element_ty), mask=mask)


def _ce_function(round_true: bool) -> type:
    class CrossEntropy(torch.autograd.Function):
        @staticmethod
        def forward(ctx, logits, labels):
            logits = logits.contiguous()
            rows, n = logits.shape
            loss = torch.empty((rows,), dtype=logits.dtype, device=logits.device)
            ce_forward_kernel[(rows,)](logits, labels, loss, n, BLOCK=triton.next_power_of_2(n))
            ctx.save_for_backward(logits, labels)
            return loss

        @staticmethod
        def backward(ctx, grad_loss):
            logits, labels = ctx.saved_tensors
            rows, n = logits.shape
            gx = torch.empty_like(logits)
            ce_backward_kernel[(rows,)](logits, labels, grad_loss.contiguous(), gx, n,
                                        BLOCK=triton.next_power_of_2(n), ROUND_TRUE=round_true)
            return gx, None

    return CrossEntropy


CE_ROUNDS, CE_EXACT = _ce_function(True), _ce_function(False)
