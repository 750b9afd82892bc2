"""Every test under tests/gpu needs an NVIDIA GPU: marked ``gpu`` and skipped cleanly without one."""
from __future__ import annotations

import functools

import pytest


@functools.cache
def cuda_available() -> bool:
    try:
        import torch
    except ImportError:
        return False
    return bool(torch.cuda.is_available())


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    skip = pytest.mark.skip(reason="no CUDA GPU on this machine")
    for item in items:
        if "tests/gpu/" in str(item.fspath).replace("\\", "/"):
            item.add_marker(pytest.mark.gpu)
            if not cuda_available():
                item.add_marker(skip)
