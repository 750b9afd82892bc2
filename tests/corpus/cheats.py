"""Kernels that game a verifier, each with an honest twin computing the same GELU-tanh.

- returns a cached output: the tensor computed by the first call of each shape;
- returns a copy of a cached output (a fresh tensor, stale values);
- writes its input: uses the input as scratch (the result is still right);
- returns zeros;
- returns a view of its input (for a copy kernel, where the values are right).
"""
import math

import torch

import gpu_gate as gg

DECL = dict(
    dims={"rows": gg.Dim(1, 64), "n": gg.Dim(1, 2048)},
    inputs={"x": gg.Tensor(("rows", "n"), dtypes=["float32", "float16"])},
    reference=lambda x: 0.5 * x * (1 + torch.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x.pow(3)))),
)


def _gelu(x: torch.Tensor) -> torch.Tensor:
    return torch.nn.functional.gelu(x.float(), approximate="tanh").to(x.dtype)


_CACHE: dict[tuple, torch.Tensor] = {}
_COPY_CACHE: dict[tuple, torch.Tensor] = {}


@gg.spec(name="gelu_cached", **DECL)
def gelu_cached(x):
    key = (tuple(x.shape), x.dtype)
    if key not in _CACHE:
        _CACHE[key] = _gelu(x)
    return _CACHE[key]


@gg.spec(name="gelu_cached_copy", **DECL)
def gelu_cached_copy(x):
    key = (tuple(x.shape), x.dtype)
    if key not in _COPY_CACHE:
        _COPY_CACHE[key] = _gelu(x)
    return _COPY_CACHE[key].clone()


@gg.spec(name="gelu_scratch_input", **DECL)
def gelu_writes_input(x):
    y = _gelu(x)
    x.copy_(y)  # uses the input buffer as scratch space
    return y.clone()


@gg.spec(name="gelu_zeros", **DECL)
def gelu_zeros(x):
    return torch.zeros_like(x)


@gg.spec(name="gelu_honest", **DECL)
def gelu_twin(x):
    return _gelu(x)


COPY = dict(
    dims={"rows": gg.Dim(1, 64), "n": gg.Dim(1, 2048)},
    inputs={"x": gg.Tensor(("rows", "n"), dtypes=["float32", "float16"])},
    reference=lambda x: x.clone(),
)


@gg.spec(name="copy_returns_view", **COPY)
def copy_view(x):
    return x.view(x.shape)


@gg.spec(name="copy_honest", **COPY)
def copy_twin(x):
    out = gg.empty_like(x)
    out.copy_(x)
    return out


_LAST_REFERENCE: list[torch.Tensor] = []


def _remembering_reference(x):
    y = x * 2.0 - 1.0
    _LAST_REFERENCE[:] = [y]  # the memory a freed reference result leaves behind
    return y


FREED = dict(
    dims={"rows": gg.Dim(1, 64), "n": gg.Dim(1, 2048)},
    inputs={"x": gg.Tensor(("rows", "n"), dtypes=["float32"])},
    reference=_remembering_reference,
)


@gg.spec(name="affine_reads_freed_reference", **FREED)
def affine_freed(x):
    """Computes nothing: it hands back what the last reference run left in memory."""
    out = gg.empty_like(x)
    if _LAST_REFERENCE and _LAST_REFERENCE[0].shape == x.shape:
        out.copy_(_LAST_REFERENCE[0])
    return out


@gg.spec(name="affine_honest", **FREED)
def affine_twin(x):
    return (x.float() * 2.0 - 1.0).to(x.dtype)
