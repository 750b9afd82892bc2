"""flash-attention's Triton cross entropy as a language model's training loop calls it.

Logits (tokens, vocab) and one label per token, the loss of each token (the trainer reduces it);
labels drawn where the logits peak, as a trained model's are. The reference is torch's cross
entropy, in float64 where gpu-gate computes the truth.
"""
import torch.nn.functional as F

import gpu_gate as gg
from flash_attn.ops.triton.cross_entropy import cross_entropy_loss


def per_token_loss(logits, labels):
    return F.cross_entropy(logits, labels, reduction="none")


@gg.spec(
    dims={"tokens": gg.Dim(1, 2048), "vocab": gg.Dim(2, 32768)},
    inputs={"logits": gg.Tensor(("tokens", "vocab"), dtypes=["float32", "bfloat16"]),
            "labels": gg.Index(("tokens",), high="vocab", peak_of="logits")},
    reference=per_token_loss,
    grads=["logits"],
)
def flash_attn_cross_entropy_gate(logits, labels):
    return cross_entropy_loss(logits, labels)  # one loss per token (its annotation says a tuple; it is not)
