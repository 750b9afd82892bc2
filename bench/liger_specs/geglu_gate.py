"""Liger-Kernel's GEGLU, forward and backward, as ``LigerGEGLUMLP`` calls it on a Gemma MLP's gate and
up projections: ``gelu_tanh(gate) * up``. The backward writes the gradients into the gate's and the
up projection's own memory (``mutates``). The reference is Hugging Face's GemmaMLP activation
(GELU with the tanh approximation), in plain torch.
"""
import torch.nn.functional as F

import gpu_gate as gg
from liger_kernel.ops.geglu import LigerGELUMulFunction


@gg.spec(
    dims={"tokens": gg.Dim(1, 4096), "intermediate": gg.Dim(1, 16384)},
    inputs={"gate": gg.Tensor(("tokens", "intermediate"), dtypes=["float32", "bfloat16", "float16"]),
            "up": gg.Tensor(("tokens", "intermediate"), dtype="like:gate")},
    reference=lambda gate, up: F.gelu(gate, approximate="tanh") * up,
    grads=["gate", "up"],
    mutates={"gate": "grad:gate", "up": "grad:up"},
)
def geglu_gate(gate, up):
    return LigerGELUMulFunction.apply(gate, up)
