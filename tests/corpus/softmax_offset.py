"""A row softmax written without subtracting the row max: exp(x) overflows float32 once x passes
88, and the rows come out NaN (inf / inf). On data near zero it is exact; only a large offset
(mean 1000) reaches it, and the schedule's first cases meet every distribution at its extreme, so a
job of 8 cases on a CPU catches it. The twin subtracts the max."""
import torch

import gpu_gate as gg

DECL = dict(
    dims={"rows": gg.Dim(1, 64), "n": gg.Dim(1, 4096)},
    inputs={"x": gg.Tensor(("rows", "n"), dtypes=["float32"])},
    reference=lambda x: torch.softmax(x, -1),
)


@gg.spec(name="softmax_no_max_subtraction", **DECL)
def softmax_bug(x):
    e = torch.exp(x.float())
    return (e / e.sum(-1, keepdim=True)).to(x.dtype)


@gg.spec(name="softmax_max_subtracted", **DECL)
def softmax_twin(x):
    xf = x.float()
    e = torch.exp(xf - xf.amax(-1, keepdim=True))
    return (e / e.sum(-1, keepdim=True)).to(x.dtype)
