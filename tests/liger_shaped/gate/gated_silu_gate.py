"""The MLP gate as a Llama-style model calls it: silu(gate_proj(x)) * up_proj(x) over (batch, seq, hidden)."""
import torch.nn.functional as F

import gpu_gate as gg
from fusekit.ops import GatedSiLU


@gg.spec(
    dims={"batch": gg.Dim(1, 4), "seq": gg.Dim(1, 256), "hidden": gg.Dim(1, 4096)},
    inputs={"gate": gg.Tensor(("batch", "seq", "hidden"), dtypes=["float32", "float16", "bfloat16"]),
            "up": gg.Tensor(("batch", "seq", "hidden"), dtype="like:gate")},
    reference=lambda gate, up: F.silu(gate) * up,
    grads=["gate", "up"],
)
def gated_silu_gate(gate, up):
    return GatedSiLU.apply(gate, up)
