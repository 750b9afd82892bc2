"""A scaled bias-add processed in blocks of 128 elements per row. The bug launches
n // 128 programs and so never writes the tail of a row; its output comes from
gg.empty_like, which the harness fills with NaN. The twin rounds the grid up and masks."""
import torch

import gpu_gate as gg

BLOCK = 128

DECL = dict(
    dims={"rows": gg.Dim(1, 32), "n": gg.Dim(1, 4096)},
    inputs={"x": gg.Tensor(("rows", "n"), dtypes=["float32", "float16"]),
            "b": gg.Tensor(("n",), dtype="like:x")},
    reference=lambda x, b: x * 0.5 + b,
)


def _blocked(x: torch.Tensor, b: torch.Tensor, programs: int) -> torch.Tensor:
    out = gg.empty_like(x)
    n = x.shape[-1]
    for p in range(programs):
        lo, hi = p * BLOCK, min(n, (p + 1) * BLOCK)
        out[:, lo:hi] = (x[:, lo:hi].float() * 0.5 + b[lo:hi].float()).to(x.dtype)
    return out


@gg.spec(name="bias_skips_tail", **DECL)
def tail_bug(x, b):
    return _blocked(x, b, x.shape[-1] // BLOCK)


@gg.spec(name="bias_masks_tail", **DECL)
def tail_twin(x, b):
    return _blocked(x, b, -(-x.shape[-1] // BLOCK))
