"""Under Triton's interpreter (no GPU), in a worker that runs the repository's code: autotuned
kernels run their first config instead of failing.

``@triton.autotune`` times every config on the device before the first launch of a new key. With no
GPU there is no driver to time with, and the autotuner raises ``RuntimeError: 0 active drivers``
before the kernel starts: every spec of a library that autotunes (flash-linear-attention's rotary
and gated norms) stopped there, and the job said the kernel *refused* its first case. Timing means
nothing in the interpreter anyway, so no config is timed: each one scores the same, and the
autotuner keeps its first (its own rule when configs tie). The kernels this applied to are listed,
for the job to say so: a GPU runs the config the autotuner picks, which may be another one.
"""
from __future__ import annotations

import os

_AUTOTUNED: list[str] = []  # kernels whose configs were not timed, in the order first seen


def interpreting() -> bool:
    return os.environ.get("TRITON_INTERPRET") == "1"


def untimed() -> list[str]:
    """The kernels whose configs were not timed so far, in the order first seen."""
    return list(_AUTOTUNED)


def untimed_autotune() -> list[str]:
    """Patch the autotuner of the Triton that this process imports, once; the list of kernels it
    has not timed so far (filled as they launch)."""
    if not interpreting():
        return _AUTOTUNED
    try:
        from triton.runtime.autotuner import Autotuner
    except ImportError:
        return _AUTOTUNED
    if getattr(Autotuner._bench, "_gpu_gate_untimed", False):
        return _AUTOTUNED

    def _bench(self: object, *args: object, config: object = None, **meta: object) -> list[float]:
        fn = getattr(self, "base_fn", None) or getattr(self, "fn", None)
        name = getattr(fn, "__name__", None) or "a Triton kernel"
        if name not in _AUTOTUNED:
            _AUTOTUNED.append(name)
        return [0.0, 0.0, 0.0]

    _bench._gpu_gate_untimed = True  # type: ignore[attr-defined]
    Autotuner._bench = _bench  # type: ignore[method-assign]
    return _AUTOTUNED
