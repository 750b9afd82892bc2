"""Liger-Kernel's SwiGLU, forward and backward, as ``LigerSwiGLUMLP`` calls it on a Llama MLP's gate
and up projections: ``silu(gate) * up``. The backward recomputes the activation and writes the
gradients into the gate's and the up projection's own memory (``mutates``), as Liger documents. The
reference is Hugging Face's LlamaMLP activation, in plain torch.
"""
import torch.nn.functional as F

import gpu_gate as gg
from liger_kernel.ops.swiglu import LigerSiLUMulFunction


@gg.spec(
    dims={"tokens": gg.Dim(1, 4096), "intermediate": gg.Dim(1, 16384)},
    inputs={"gate": gg.Tensor(("tokens", "intermediate"), dtypes=["float32", "bfloat16", "float16"]),
            "up": gg.Tensor(("tokens", "intermediate"), dtype="like:gate")},
    reference=lambda gate, up: F.silu(gate) * up,
    grads=["gate", "up"],
    mutates={"gate": "grad:gate", "up": "grad:up"},
)
def swiglu_gate(gate, up):
    return LigerSiLUMulFunction.apply(gate, up)
