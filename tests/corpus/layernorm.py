"""A layer norm computed over a power-of-two block of lanes. The bug's variance sums
(x - mean)^2 over every lane, so each padding lane adds mean^2: invisible on randn,
huge with a large mean. The twin masks the padding."""
import torch

import gpu_gate as gg

DECL = dict(
    dims={"rows": gg.Dim(1, 64), "cols": gg.Dim(1, 4096)},
    inputs={"x": gg.Tensor(("rows", "cols"), dtypes=["float32", "float16"])},
    reference=lambda x: torch.nn.functional.layer_norm(x, x.shape[-1:], eps=1e-5),
)


def _layernorm(x: torch.Tensor, mask_padding: bool) -> torch.Tensor:
    rows, n = x.shape
    block = 1 << max(0, (n - 1).bit_length())
    lanes = torch.zeros((rows, block), dtype=torch.float32, device=x.device)
    lanes[:, :n] = x.float()
    mean = lanes.sum(-1, keepdim=True) / n
    centered = lanes - mean
    if mask_padding:
        centered[:, n:] = 0
    var = (centered * centered).sum(-1, keepdim=True) / n
    return ((lanes[:, :n] - mean) * torch.rsqrt(var + 1e-5)).to(x.dtype)


@gg.spec(name="layernorm_padded_variance", **DECL)
def layernorm_bug(x):
    return _layernorm(x, mask_padding=False)


@gg.spec(name="layernorm_masked_variance", **DECL)
def layernorm_twin(x):
    return _layernorm(x, mask_padding=True)
