"""Liger-Kernel's fused linear JSD, the distillation loss, with ignored tokens.

A distillation trainer hands over the student's and the teacher's last hidden states, their output
projections and the labels, where padding and prompt tokens carry ``ignore_index`` (-100): the loss
is the generalized Jensen-Shannon divergence between the teacher's and the student's next-token
distributions, averaged over the tokens that are not ignored. The labels are drawn as a class per
token and a flag per token that says whether it is ignored (every token, none, or any mix), and
mapped to -100 the same way for the kernel and the reference. The reference is the plain
projection, log-softmax and divergence, in float64 where gpu-gate computes the truth.
"""
import torch

import gpu_gate as gg
from liger_kernel.ops.fused_linear_jsd import LigerFusedLinearJSDFunction

IGNORE_INDEX = -100
BETA = 0.5


def labels(target, ignored):
    return torch.where(ignored.bool(), torch.full_like(target, IGNORE_INDEX), target)


def generalized_jsd(student_input, student_weight, teacher_input, teacher_weight, target, ignored):
    log_q = torch.log_softmax(student_input @ student_weight.T, dim=-1)  # the student's
    log_p = torch.log_softmax(teacher_input @ teacher_weight.T, dim=-1)  # the teacher's
    p, q = log_p.exp(), log_q.exp()
    m = BETA * p + (1 - BETA) * q
    per_token = (BETA * p * log_p + (1 - BETA) * q * log_q - m * m.log()).sum(-1)
    kept = labels(target, ignored) != IGNORE_INDEX
    return (per_token * kept).sum() / kept.sum().clamp(min=1)


@gg.spec(
    dims={"tokens": gg.Dim(1, 2048), "hidden": gg.Dim(1, 1024), "vocab": gg.Dim(2, 8192)},
    inputs={"student_input": gg.Tensor(("tokens", "hidden"), dtypes=["float32", "bfloat16"]),
            "student_weight": gg.Tensor(("vocab", "hidden"), dtype="like:student_input"),
            "teacher_input": gg.Tensor(("tokens", "hidden"), dtype="like:student_input"),
            "teacher_weight": gg.Tensor(("vocab", "hidden"), dtype="like:student_input"),
            "target": gg.Index(("tokens",), high="vocab"),
            "ignored": gg.Index(("tokens",), high=2)},
    reference=generalized_jsd,
    grads=["student_input", "student_weight"],
)
def liger_fljsd_gate(student_input, student_weight, teacher_input, teacher_weight, target, ignored):
    return LigerFusedLinearJSDFunction.apply(student_input, student_weight, teacher_input, teacher_weight,
                                             labels(target, ignored), BETA, IGNORE_INDEX, 1.0)
