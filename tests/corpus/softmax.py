"""A row softmax over rows that may be -inf throughout (a fully masked attention row).
The spec's reference defines such a row as all zeros. The bug subtracts the row max, so
an all -inf row becomes NaN; the twin guards it."""
import torch

import gpu_gate as gg


def masked_softmax(x):
    m = x.amax(-1, keepdim=True)
    m = torch.where(torch.isinf(m), torch.zeros_like(m), m)
    e = torch.exp(x - m)
    s = e.sum(-1, keepdim=True)
    return torch.where(s > 0, e / s, torch.zeros_like(e))


DECL = dict(
    dims={"rows": gg.Dim(1, 64), "n": gg.Dim(1, 2048)},
    inputs={"x": gg.Tensor(("rows", "n"), dtypes=["float32", "float16"],
                           dists=["neg_inf_spans", "normal", "peaked"])},
    reference=masked_softmax,
)


@gg.spec(name="softmax_nan_rows", **DECL)
def softmax_bug(x):
    xf = x.float()
    e = torch.exp(xf - xf.amax(-1, keepdim=True))
    return (e / e.sum(-1, keepdim=True)).to(x.dtype)


@gg.spec(name="softmax_guarded", **DECL)
def softmax_twin(x):
    return masked_softmax(x.float()).to(x.dtype)
