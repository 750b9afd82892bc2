"""An RMSNorm forward written for programmatic dependent launch (launched with launch_pdl=True):
its input ``x`` is the previous layer's output, so the kernel may start while that layer's kernel
still runs. It loads the weight, which no earlier kernel writes, and then waits for the earlier
kernel (``gdc_wait``) before it reads ``x``. The racy one reads ``x`` first and waits after:
correct whenever ``x`` was ready long before the launch, as in every unit test."""
import triton
import triton.language as tl


@triton.jit
def rms_norm_reads_early(X, W, Y, stride, n_cols, eps, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    mask = cols < n_cols
    w = tl.load(W + cols, mask=mask, other=0.0).to(tl.float32)
    x = tl.load(X + row * stride + cols, mask=mask, other=0.0).to(tl.float32)
    tl.extra.cuda.gdc_wait()
    rstd = 1.0 / tl.sqrt(tl.sum(x * x, axis=0) / n_cols + eps)
    tl.store(Y + row * stride + cols, (x * rstd * w).to(Y.dtype.element_ty), mask=mask)


@triton.jit
def rms_norm_waits(X, W, Y, stride, n_cols, eps, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    mask = cols < n_cols
    w = tl.load(W + cols, mask=mask, other=0.0).to(tl.float32)
    tl.extra.cuda.gdc_wait()
    x = tl.load(X + row * stride + cols, mask=mask, other=0.0).to(tl.float32)
    rstd = 1.0 / tl.sqrt(tl.sum(x * x, axis=0) / n_cols + eps)
    tl.store(Y + row * stride + cols, (x * rstd * w).to(Y.dtype.element_ty), mask=mask)
