"""Calling the spec's functions the way both workers do: the candidate and the reference get the
same inputs, the same constant keyword arguments and, for backward specs, the same upstream
gradients; their outputs come back as a dict. Shared by the candidate and the reference workers;
nothing here compares."""
from __future__ import annotations

import contextlib
import sys
from collections.abc import Callable, Iterator, Mapping
from typing import TYPE_CHECKING

from ..spec import Spec

if TYPE_CHECKING:
    import torch

FATAL_MARKERS = ("CUDA error", "illegal memory access", "device-side assert", "unspecified launch failure",
                 "misaligned address", "CUDA_ERROR_", "an illegal instruction")


def kwargs_for(spec: Spec, dims: dict[str, int]) -> dict[str, object]:
    """The constant keyword arguments of a call: the spec's params and its dim_args."""
    return {**spec.params, **{d: dims[d] for d in spec.dim_args}}


def normalize(out: object) -> dict[str, object]:
    if isinstance(out, dict):
        return {str(k): v for k, v in out.items()}
    if isinstance(out, (tuple, list)):
        return {f"out{i}": v for i, v in enumerate(out)}
    return {"out": out}



def is_fatal(exc: BaseException) -> bool:
    return any(m in str(exc) for m in FATAL_MARKERS)



def sync(device: str) -> None:
    """Wait for every stream on the device: a result finished on a side stream is read only
    after this (and is caught by the unordered-stream guard if it was not ordered)."""
    if device == "cuda":
        import torch

        torch.cuda.synchronize()



def upstream_recipe(outs: Mapping[str, object], seed: int, expanded: bool = False) -> dict[str, dict[str, object]]:
    """What makes each output's random upstream gradient (:func:`upstream_from_recipe`): its shape
    and seed, and whether it is equal along the first dim (an ``expanded`` gradient). Plain JSON:
    a few numbers cross between the processes instead of the gradient's float64 values, and every
    process that makes it from the same recipe, on the same device, gets the same values."""
    import torch

    recipe: dict[str, dict[str, object]] = {}
    for k, o in outs.items():
        if not isinstance(o, torch.Tensor) or not o.is_floating_point():
            continue
        recipe[k] = {"shape": [int(n) for n in o.shape], "seed": seed * 17 + 5 + len(recipe), "expanded": expanded}
    return recipe


def upstream_from_recipe(recipe: object, device: torch.device | str) -> dict[str, torch.Tensor]:
    """The upstream gradients a recipe describes, in float64 on ``device``: never all ones."""
    import torch

    if not isinstance(recipe, dict):
        raise ValueError("an upstream gradient's recipe is a mapping of outputs")
    grads: dict[str, torch.Tensor] = {}
    for k, r in recipe.items():
        shape, seed = [int(n) for n in r["shape"]], int(r["seed"])
        gen = torch.Generator(device=device)
        gen.manual_seed(seed)
        g = torch.randn(shape, generator=gen, device=device, dtype=torch.float64)
        grads[str(k)] = expanded_values({"g": g})["g"] if r.get("expanded") else g
    return grads


def expanded_values(grads: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """Upstream values equal along the first dim, for an ``expanded`` gradient: the reference
    gets the same values, contiguous."""
    return {k: (v[:1].expand(v.shape).clone() if v.dim() >= 1 and v.shape[0] > 1 else v) for k, v in grads.items()}



def grad_tensor(values: torch.Tensor, dtype: torch.dtype, layout: str) -> torch.Tensor:
    """The upstream gradient in ``dtype``; ``strided``: transposed in memory (rank >= 2)
    or every other element of a wider buffer (rank 1); ``expanded``: one row with a stride
    of 0 along the first dim (the values are equal along it, see :func:`expanded_values`)."""
    import torch

    g = values.to(dtype)
    if layout == "contiguous" or g.dim() == 0:
        return g
    if layout == "expanded":
        return g[:1].expand(g.shape) if g.shape[0] > 1 else g
    if g.dim() >= 2:
        return g.transpose(-1, -2).contiguous().transpose(-1, -2)
    wide = torch.empty((g.shape[0] * 2,), dtype=dtype, device=g.device)
    wide[::2] = g
    return wide[::2]



def call_with_grads(spec: Spec, fn: Callable[..., object], inputs: Mapping[str, torch.Tensor],
                    kwargs: Mapping[str, object], upstream: Mapping[str, torch.Tensor] | None,
                    grad_layout: str = "contiguous") -> dict[str, object]:
    import torch

    if not spec.grads:
        return normalize(fn(**inputs, **kwargs))
    leaves = {}
    for g in spec.grads:
        leaves[g] = inputs[g].detach().requires_grad_(True)
        inputs = {**inputs, g: leaves[g]}
    outs = normalize(fn(**inputs, **kwargs))
    upstream = upstream or {}
    diff = {k: v for k, v in outs.items() if isinstance(v, torch.Tensor) and v.requires_grad and k in upstream}
    if diff:
        gos = [grad_tensor(upstream[k], v.dtype, grad_layout) for k, v in diff.items()]
        grads = torch.autograd.grad(list(diff.values()), list(leaves.values()), gos, allow_unused=True)
        for name, gr in zip(leaves, grads):
            outs[f"grad:{name}"] = gr
    return {k: (v.detach() if isinstance(v, torch.Tensor) else v) for k, v in outs.items()}



def interpreter_error(exc: BaseException) -> BaseException | None:
    """The error of Triton's interpreter in ``exc``'s chain, if any: the interpreter wraps
    whatever stopped it inside a kernel (libdevice calls, inline asm, an op it does not
    implement) in an ``InterpreterError``. That says the kernel could not run *here*; it is
    not the kernel refusing an input."""
    seen: set[int] = set()
    cur: BaseException | None = exc
    while cur is not None and id(cur) not in seen:
        seen.add(id(cur))
        if type(cur).__name__ == "InterpreterError" and type(cur).__module__.startswith("triton"):
            return cur
        cur = cur.__cause__ or cur.__context__
    return None



def first_line(exc: BaseException, limit: int = 400) -> str:
    """The exception in one line: its type and first line; where that line only says where (it ends
    with a colon, as Triton's ``CompilationError`` does before the source and the reason), its last
    line too, which says what."""
    lines = [ln.strip() for ln in str(exc).strip().splitlines() if ln.strip()]
    head = lines[0] if lines else ""
    if len(lines) > 1 and head.endswith(":"):
        head = f"{head} {lines[-1]}"
    line = f"{type(exc).__name__}: {head}".rstrip(": ")
    if len(line) <= limit:
        return line
    room = line[: limit - 1]
    if not line[limit - 1].isspace():  # cut between words, not inside one (unless one word fills half)
        at = room.rfind(" ")
        room = room[:at] if at >= limit // 2 else room
    return room.rstrip(" ,;:(") + "…"




@contextlib.contextmanager
def torch_settings() -> Iterator[None]:
    """torch fills every ``torch.empty`` with NaN in deterministic mode: a scratch buffer the
    kernel never writes then poisons the result instead of passing by luck (zeroed memory).
    The previous settings come back afterwards, for callers that run checks in-process."""
    import warnings

    import torch
    import torch.utils.deterministic as det

    before = (torch.are_deterministic_algorithms_enabled(), torch.is_deterministic_algorithms_warn_only_enabled(),
              det.fill_uninitialized_memory)  # type: ignore[attr-defined]
    _deterministic(True, warn_only=True)
    det.fill_uninitialized_memory = True  # type: ignore[attr-defined]
    try:
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", message=".*deterministic.*")
            warnings.filterwarnings("ignore", category=UserWarning)
            yield
    finally:
        _deterministic(before[0], warn_only=before[1])
        det.fill_uninitialized_memory = before[2]  # type: ignore[attr-defined]


def _deterministic(mode: bool, warn_only: bool) -> None:
    """torch's deterministic-algorithms flag, as ``torch.use_deterministic_algorithms`` sets it, without
    importing Inductor's configuration (sympy and 900 modules, two seconds of CPU in every worker) when
    the code under test has not imported Inductor itself. Where it has, the public call sets Inductor's
    flag too, as the code would see it under that call."""
    import torch

    if "torch._inductor.config" in sys.modules:
        torch.use_deterministic_algorithms(mode, warn_only=warn_only)
    else:
        torch._C._set_deterministic_algorithms(mode, warn_only=warn_only)
