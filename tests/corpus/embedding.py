"""An embedding whose backward scatters the upstream gradient into the weight's rows.
The bug stores instead of adding, so duplicate token ids lose all but one row (Zipf
ids make duplicates the rule); the twin adds."""
import torch

import gpu_gate as gg

DECL = dict(
    dims={"tokens": gg.Dim(1, 2048), "vocab": gg.Dim(1, 512), "dim": gg.Dim(1, 64)},
    inputs={"ids": gg.Index(("tokens",), high="vocab"),
            "weight": gg.Tensor(("vocab", "dim"), dtypes=["float32"])},
    reference=lambda ids, weight: torch.nn.functional.embedding(ids, weight),
    grads=["weight"],
)


def _make(accumulate: bool) -> type:
    class Embedding(torch.autograd.Function):
        @staticmethod
        def forward(ctx, weight, ids):
            ctx.save_for_backward(ids)
            ctx.vocab = weight.shape[0]
            return weight.index_select(0, ids.reshape(-1)).reshape(*ids.shape, weight.shape[1])

        @staticmethod
        def backward(ctx, grad_out):
            (ids,) = ctx.saved_tensors
            g = grad_out.reshape(-1, grad_out.shape[-1]).float()
            flat = ids.reshape(-1)
            grad_w = torch.zeros((ctx.vocab, g.shape[1]), dtype=torch.float32, device=g.device)
            if accumulate:
                grad_w.index_add_(0, flat, g)
            else:
                grad_w[flat] = g  # a plain store: duplicate ids overwrite each other
            return grad_w.to(grad_out.dtype), None

    return Embedding


_LOSSY, _ADDS = _make(False), _make(True)


@gg.spec(name="embedding_scatter_store", **DECL)
def embedding_bug(ids, weight):
    return _LOSSY.apply(weight, ids)


@gg.spec(name="embedding_scatter_add", **DECL)
def embedding_twin(ids, weight):
    return _ADDS.apply(weight, ids)
