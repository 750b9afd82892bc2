"""unsloth's FP8 weight dequantisation, as a model loaded from a block-quantised FP8 checkpoint calls it.

DeepSeek-style FP8 checkpoints store each weight matrix in float8_e4m3 with one float32 scale per
128 x 128 block; unsloth dequantises them to bf16 before a matmul. The spec quantises a weight the
way such a checkpoint holds it (the scales are a positive input, one per block) and asks for the bf16
weight back. The reference is the definition: each element times its block's scale.
"""
import torch

import gpu_gate as gg
from unsloth.kernels.fp8 import weight_dequant

BLOCK = 128


def checkpoint(w, scales):
    """The stored weight (float8_e4m3) and its per-block scales (float32), as the checkpoint holds them."""
    s = scales[::BLOCK, ::BLOCK].float().contiguous()
    return w.to(torch.float8_e4m3fn), s


def dequantised(w, scales):
    x, s = checkpoint(w, scales)
    rows, cols = x.shape
    full = s.repeat_interleave(BLOCK, 0)[:rows].repeat_interleave(BLOCK, 1)[:, :cols]
    return (x.double() * full.double()).to(torch.bfloat16)


@gg.spec(
    dims={"rows": gg.Dim(1, 8192), "cols": gg.Dim(1, 8192)},
    inputs={"w": gg.Tensor(("rows", "cols"), dtypes=["float32"], layouts=["contiguous"]),
            "scales": gg.Tensor(("rows", "cols"), dtypes=["float32"], dists=["uniform_pos"],
                                layouts=["contiguous"])},
    reference=dequantised,
    devices=["cuda"],
)
def unsloth_fp8_dequant_gate(w, scales):
    x, s = checkpoint(w, scales)
    return weight_dequant(x, s, dtype=torch.bfloat16)
