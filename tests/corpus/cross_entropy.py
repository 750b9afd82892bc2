"""Cross-entropy (per-row loss) with its gradient, for bf16 logits whose label logit
stands out (peaked logits: the label is the hot class). The bug rounds the true-class
probability to bf16 before computing p - 1: with p close to 1 that erases the gradient of
the true class, a few elements of a large tensor. The twin subtracts in fp32."""
import torch
import torch.nn.functional as F

import gpu_gate as gg
from gpu_gate.spec import upcast


def reference(logits):
    # computed in fp32 and rounded once, as a fused kernel does (CPU torch's own bf16
    # cross-entropy keeps bf16 intermediates and is as wrong as the bug at the true class)
    return F.cross_entropy(upcast(logits), logits.argmax(-1), reduction="none").to(logits.dtype)


DECL = dict(
    dims={"rows": gg.Dim(1, 8), "classes": gg.Dim(2, 8192)},
    inputs={"logits": gg.Tensor(("rows", "classes"), dtypes=["bfloat16"], dists=["peaked"])},
    reference=reference,
    grads=["logits"],
)


def _make(round_true_class: bool) -> type:
    class CrossEntropy(torch.autograd.Function):
        @staticmethod
        def forward(ctx, logits, labels):
            logp = torch.log_softmax(logits.float(), -1)
            ctx.save_for_backward(logits, labels)
            return (-logp.gather(-1, labels[:, None])[:, 0]).to(logits.dtype)

        @staticmethod
        def backward(ctx, grad_loss):
            logits, labels = ctx.saved_tensors
            p = torch.softmax(logits.float(), -1)
            p_true = p.gather(-1, labels[:, None])
            if round_true_class:
                p_true = p_true.to(torch.bfloat16).float()
            g = p.scatter(-1, labels[:, None], p_true - 1.0)
            return (g * grad_loss.float()[:, None]).to(logits.dtype), None

    return CrossEntropy


_ROUNDS, _EXACT = _make(True), _make(False)


@gg.spec(name="cross_entropy_bf16_true_class", **DECL)
def cross_entropy_bug(logits):
    return _ROUNDS.apply(logits, logits.argmax(-1))


@gg.spec(name="cross_entropy_fp32_true_class", **DECL)
def cross_entropy_twin(logits):
    return _EXACT.apply(logits, logits.argmax(-1))
