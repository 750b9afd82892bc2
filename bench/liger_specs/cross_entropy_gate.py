"""Liger-Kernel's cross entropy, forward and backward, as ``LigerCrossEntropyLoss`` computes a causal
LM's loss: the mean over the tokens that are not ignored (labels ``-100``: padding, the prompt),
with Gemma 2's logit soft-capping (30) or none. The labels sit at the hot logit, as a trained
model's do; each token is ignored or not by a flag drawn beside it. The forward writes the gradient
into the logits' own memory (``mutates``), and the backward scales it there.

The reference is torch's cross entropy over the tokens that are not ignored; where every token is
ignored, Liger returns 0 (no NaN reaches the optimiser), and so does the reference.
"""
import torch
import torch.nn.functional as F

import gpu_gate as gg
from liger_kernel.ops.cross_entropy import LigerCrossEntropyFunction

IGNORE_INDEX = -100


def labels(target, ignored):
    return torch.where(ignored.bool(), torch.full_like(target, IGNORE_INDEX), target)


def mean_cross_entropy(logits, target, ignored, softcap):
    capped = softcap * torch.tanh(logits / softcap) if softcap else logits
    losses = F.cross_entropy(capped, labels(target, ignored), ignore_index=IGNORE_INDEX, reduction="none")
    return losses.sum() / (ignored == 0).sum().clamp(min=1)


@gg.spec(
    dims={"tokens": gg.Dim(1, 2048), "vocab": gg.Dim(2, 131072), "softcap": gg.Dim(0, 30, values=(0, 30))},
    inputs={"logits": gg.Tensor(("tokens", "vocab"), dtypes=["float32", "bfloat16"]),
            "target": gg.Index(("tokens",), high="vocab", peak_of="logits"),
            "ignored": gg.Index(("tokens",), high=2)},
    reference=mean_cross_entropy,
    grads=["logits"],
    mutates={"logits": "grad:logits"},
    dim_args=["softcap"],
)
def cross_entropy_gate(logits, target, ignored, softcap):
    loss, *_ = LigerCrossEntropyFunction.apply(logits, labels(target, ignored), None, IGNORE_INDEX, 0.0, 0.0,
                                               "mean", float(softcap) if softcap else None)
    return loss
