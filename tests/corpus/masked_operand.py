"""A weighted row sum processed in blocks of 64 elements, as a Triton kernel would write it: the
bug loads x over whole blocks with no mask and masks only w (``other=0``), trusting the zero weight
to cancel whatever lies past the row's end. Past the end of the last row is whatever memory follows
the input. The pattern of flash-linear-attention #1135, whose unmasked load of the gate met only
zeroed state rows. The twin masks x too."""
import torch

import gpu_gate as gg

BLOCK = 64

DECL = dict(
    dims={"rows": gg.Dim(1, 32), "n": gg.Dim(1, 2048)},
    inputs={"x": gg.Tensor(("rows", "n"), dtypes=["float32", "float16"], layouts=["contiguous"]),
            "w": gg.Tensor(("n",), dtype="like:x")},
    reference=lambda x, w: (x * w).sum(-1),
)


def _weighted(x: torch.Tensor, w: torch.Tensor, mask_x: bool) -> torch.Tensor:
    rows, n = x.shape
    padded = -(-n // BLOCK) * BLOCK
    wp = torch.zeros(padded, dtype=torch.float32, device=x.device)
    wp[:n] = w.float()  # masked load of w: lanes past n are 0
    out = torch.empty(rows, dtype=x.dtype, device=x.device)
    for r in range(rows):
        if mask_x:
            xr = torch.zeros(padded, dtype=torch.float32, device=x.device)
            xr[:n] = x[r].float()
        else:  # an unmasked load: the whole last block, past the row's end
            xr = torch.as_strided(x, (padded,), (1,), x.storage_offset() + r * x.stride(0)).float()
        out[r] = (xr * wp).sum().to(x.dtype)
    return out


@gg.spec(name="weighted_sum_masks_one_operand", **DECL)
def masked_operand_bug(x, w):
    return _weighted(x, w, mask_x=False)


@gg.spec(name="weighted_sum_masks_both", **DECL)
def masked_operand_twin(x, w):
    return _weighted(x, w, mask_x=True)
