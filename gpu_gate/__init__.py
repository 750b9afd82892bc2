"""gpu-gate: a merge gate for GPU kernels.

The names a gate spec uses are re-exported here. Nothing in this module imports
torch: ``gpu-gate plan``/``report``/``--help`` must run without it.
"""
from __future__ import annotations

from typing import Any

from .spec import Dim, Index, Tensor, Tolerance, spec, upcast

__version__ = "0.1.0"

__all__ = ["Dim", "Index", "Tensor", "Tolerance", "spec", "upcast", "empty", "empty_like", "check", "cuda",
           "__version__"]


def empty(*shape: Any, dtype: Any = None, device: Any = None) -> Any:
    """An output buffer for a candidate: NaN-filled and watched by guard bands inside the candidate's worker
    (a plain ``torch.empty`` elsewhere). Use it in specs that allocate the kernel's output."""
    from .worker.watch import guarded_empty

    return guarded_empty(shape, dtype=dtype, device=device)


def empty_like(t: Any, *, dtype: Any = None) -> Any:
    from .worker.watch import guarded_empty

    return guarded_empty(tuple(t.shape), dtype=dtype or t.dtype, device=t.device)


def check(spec: Any, **kwargs: Any) -> Any:
    """Run a gate spec's checks from a test (see :func:`gpu_gate.testing.check`)."""
    from .testing import check as run_checks

    return run_checks(spec, **kwargs)


def __getattr__(name: str) -> Any:
    if name == "cuda":  # gg.cuda.load(...) for raw .cu kernels; imports CuPy only when used
        import importlib

        return importlib.import_module(".cuda", __name__)
    raise AttributeError(name)
