"""Which of gpu-gate's extras brings a module a command needs here, said in one line.

gpu-gate's core installs without torch or Triton (``plan``, ``report`` and ``validate-policy`` need
neither). The commands that run kernels do: without them a run would end in import errors deep
inside a job. So ``demo``, ``check`` and ``pytest --gpu-gate`` look first (without importing
anything) and name the extra to install: ``cpu`` (torch and Triton, what a machine without a GPU
needs), ``triton`` alone, or on a GPU runner ``gpu-cu13`` / ``gpu-cu12`` with the CUDA build of torch.
"""
from __future__ import annotations

import importlib.util
import subprocess
import sys
from collections.abc import Iterable

from .errors import GateError

DISTRIBUTION = "gpu-kernel-gate"


def lacking(modules: Iterable[str], python: str | None = None) -> list[str]:
    """The modules that ``python`` (default: this interpreter) cannot import, found without importing them."""
    modules = list(modules)
    if python is None:
        return [m for m in modules if not _importable(m)]
    code = "import importlib.util, sys; print(' '.join(m for m in sys.argv[1:] if importlib.util.find_spec(m) is None))"
    res = subprocess.run([python, "-I", "-c", code, *modules], capture_output=True, text=True, timeout=60)
    return res.stdout.split() if res.returncode == 0 else modules


def _importable(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):  # a parent that does not import, or a module planted as None
        return False


def install_line(missing: list[str], needed_by: str, python: str | None = None) -> str:
    """``gpu-gate demo needs torch, which /usr/bin/python3 cannot import: install ...``"""
    what = " and ".join(missing)
    extra = "triton" if missing == ["triton"] else "cpu"
    also = ("; `cpu` brings torch and Triton together" if extra == "triton" else
            "; on a GPU runner `gpu-cu13` or `gpu-cu12`, after the CUDA build of torch")
    return (f"{needed_by} needs {what}, which {python or sys.executable} cannot import: install gpu-gate with the "
            f"`{extra}` extra (pip install '{DISTRIBUTION}[{extra}]', or '.[{extra}]' in a checkout of gpu-gate{also})")


def require(modules: Iterable[str], needed_by: str, python: str | None = None) -> None:
    """A GateError in one line when ``python`` cannot import one of ``modules``."""
    missing = lacking(modules, python)
    if missing:
        raise GateError(install_line(missing, needed_by, python))
