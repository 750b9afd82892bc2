"""CUDA tools (nvcc, compute-sanitizer, kernel names) and the spec API for raw ``.cu`` kernels (``gg.cuda``).

Import-light: CuPy, torch and Triton are imported only when a function that needs
them is called (``plan`` and ``validate-policy`` must not pull them in).

A spec launches a raw CUDA kernel with::

    import gpu_gate as gg
    add = gg.cuda.load("csrc/add.cu", "add_one")
    add((blocks,), (256,), x, gg.cuda.int32(n))
"""
from __future__ import annotations

from typing import Any

_LAZY = {
    "load": "nvrtc",
    "Kernel": "nvrtc",
    "disable_pools": "nvrtc",
    "compile_ptx": "nvrtc",
    "NvrtcCompileError": "nvrtc",
    "int32": "nvrtc",
    "int64": "nvrtc",
    "uint32": "nvrtc",
    "uint64": "nvrtc",
    "float32": "nvrtc",
    "float64": "nvrtc",
}

__all__ = sorted(_LAZY)


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'gpu_gate.cuda' has no attribute {name!r}")
    from importlib import import_module

    # relative to this package's own name: in a worker the gate is loaded under another (worker.disguise)
    return getattr(import_module(f"{__name__.rpartition('.')[0]}.worker.{module}"), name)
