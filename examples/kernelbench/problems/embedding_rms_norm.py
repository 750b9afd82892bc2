"""A transformer's input: token embeddings looked up in a bfloat16 table, then RMSNorm over the hidden
dimension. Its backward scatters the normalised rows' gradients into the table's gradient, summing the
gradients of every occurrence of a token: a long sum for a frequent token."""
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, hidden: int, eps: float):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(hidden))
        self.eps = eps

    def forward(self, ids: torch.Tensor, table: torch.Tensor) -> torch.Tensor:
        x = table.index_select(0, ids)
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * self.weight.to(x.dtype)


tokens = 256
vocab = 512
hidden = 128


def get_inputs():
    return [torch.randint(0, vocab, (tokens,)), torch.randn(vocab, hidden, dtype=torch.bfloat16)]


def get_init_inputs():
    return [hidden, 1e-6]
