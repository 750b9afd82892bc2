"""unsloth's fused cross entropy, as its patched causal-LM loss calls it on the model's logits.

The model's head returns the logits as (batch, seq, vocab), in the model's dtype; the labels carry
``-100`` where a token is not trained on (padding, the prompt), drawn as a class per token and a flag
per token that says whether it is ignored (every token, none, or any mix), and mapped to -100 the
same way for the kernel and the reference. The labels sit at the hot logit, as a trained model's do.
Gemma 2 caps its logits (``logit_softcapping`` 30); vocabularies past 65,536 (Gemma's 256K) take the
chunked kernel. The backward writes the gradient into the logits' own memory (``mutates``). The
reference is the mean cross entropy over the tokens that are not ignored, in plain torch.
"""
import torch

import gpu_gate as gg
from unsloth.kernels.cross_entropy_loss import fast_cross_entropy_loss

IGNORE_INDEX = -100


def labels(target, ignored):
    return torch.where(ignored.bool(), torch.full_like(target, IGNORE_INDEX), target)


def capped(logits, softcap):
    return softcap * torch.tanh(logits / softcap) if softcap else logits


def mean_cross_entropy(logits, target, ignored, softcap):
    y = labels(target, ignored)
    flat = capped(logits, softcap).reshape(-1, logits.shape[-1])
    return torch.nn.functional.cross_entropy(flat, y.reshape(-1), ignore_index=IGNORE_INDEX)


@gg.spec(
    dims={"batch": gg.Dim(1, 4), "seq": gg.Dim(1, 1024), "vocab": gg.Dim(2, 262144),
          "softcap": gg.Dim(0, 30, values=(0, 30))},
    inputs={"logits": gg.Tensor(("batch", "seq", "vocab"), dtypes=["bfloat16", "float16", "float32"],
                                layouts=["contiguous", "offset"]),  # as the model's head returns them
            "target": gg.Index(("batch", "seq"), high="vocab", peak_of="logits"),
            "ignored": gg.Index(("batch", "seq"), high=2)},
    reference=mean_cross_entropy,
    grads=["logits"],
    mutates={"logits": "grad:logits"},
    dim_args=["softcap"],
    devices=["cuda"],  # the kernels' outputs are allocated on "cuda:0"
)
def unsloth_cross_entropy_gate(logits, target, ignored, softcap):
    return fast_cross_entropy_loss(logits, labels(target, ignored), logit_softcapping=softcap)
