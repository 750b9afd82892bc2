"""A row sum of bf16 rows, written the way a simple Triton kernel does it: each step sums
one BLOCK-wide chunk of the row (in fp32) and adds it to a running accumulator. The bug
keeps that accumulator in bf16, so every add rounds; once the running sum is large, the
chunk sums fall below half an ulp and are lost. Invisible at short rows, where it is even
more accurate than torch's bf16 sum. The twin keeps the accumulator in fp32."""
import torch

import gpu_gate as gg

BLOCK = 128

DECL = dict(
    dims={"rows": gg.Dim(1, 8), "n": gg.Dim(1, 1 << 18, reduction=True)},
    inputs={"x": gg.Tensor(("rows", "n"), dtypes=["bfloat16"])},
    reference=lambda x: x.sum(-1),
)


def _chunk_sums(x: torch.Tensor) -> torch.Tensor:
    rows, n = x.shape
    nb = max(1, -(-n // BLOCK))
    padded = torch.zeros((rows, nb * BLOCK), dtype=torch.float32, device=x.device)
    padded[:, :n] = x.float()
    return padded.view(rows, nb, BLOCK).sum(-1)


def _rowsum(x: torch.Tensor, acc_dtype: torch.dtype) -> torch.Tensor:
    parts = _chunk_sums(x)
    acc = torch.zeros(x.shape[0], dtype=acc_dtype, device=x.device)
    for j in range(parts.shape[1]):
        acc = (acc.float() + parts[:, j]).to(acc_dtype)
    return acc.to(torch.bfloat16)


@gg.spec(name="rowsum_bf16_acc", **DECL)
def rowsum_bug(x):
    return _rowsum(x, torch.bfloat16)


@gg.spec(name="rowsum_fp32_acc", **DECL)
def rowsum_twin(x):
    return _rowsum(x, torch.float32)
