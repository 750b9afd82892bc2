"""Cross-entropy with its labels as an input, declared as most users declare them:
``gg.Index(("rows",), high="classes")``, with no ``peak_of=``. The bug rounds the true-class
probability to bf16 before computing p - 1, which erases the true class's gradient once p is
close to 1 (a narrow band of peak strengths, FACTS.md). Labels drawn apart from the logits never
reach it; the gate infers that the labels index the logits' class dim and puts some cases' labels
at the logits' peak, sweeping p(label) from 0.5 to 1 - 1e-6. The twin subtracts in fp32."""
import torch
import torch.nn.functional as F

import gpu_gate as gg
from gpu_gate.spec import upcast


def reference(logits, labels):
    return F.cross_entropy(upcast(logits), labels, reduction="none").to(logits.dtype)


DECL = dict(
    dims={"rows": gg.Dim(1, 8), "classes": gg.Dim(2, 8192)},
    inputs={"logits": gg.Tensor(("rows", "classes"), dtypes=["bfloat16"], dists=["normal"]),
            "labels": gg.Index(("rows",), high="classes")},
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


@gg.spec(name="cross_entropy_undeclared_bf16_true_class", **DECL)
def cross_entropy_bug(logits, labels):
    return _ROUNDS.apply(logits, labels)


@gg.spec(name="cross_entropy_undeclared_fp32_true_class", **DECL)
def cross_entropy_twin(logits, labels):
    return _EXACT.apply(logits, labels)
