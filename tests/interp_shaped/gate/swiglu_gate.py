"""SwiGLU in a bfloat16 model: silu(gate) * up, the product in bfloat16."""
import torch.nn.functional as F

import gpu_gate as gg
from normkit.swiglu import swiglu


@gg.spec(
    dims={"tokens": gg.Dim(1, 64), "intermediate": gg.Dim(1, 2048)},
    inputs={"gate": gg.Tensor(("tokens", "intermediate"), dtypes=["bfloat16", "float32"]),
            "up": gg.Tensor(("tokens", "intermediate"), dtype="like:gate")},
    reference=lambda gate, up: F.silu(gate) * up,
)
def swiglu_gate(gate, up):
    return swiglu(gate, up)
