"""What ``gpu-gate init`` reads of a repository, fast: which files may define kernels at all (by their
bytes), and, for the kernel files, the entry points that reach their kernels (see init_entry).

A Python kernel is found through the imports that bind its decorator (``import triton``), so a file
that names no GPU module anywhere in its text defines none; CUDA C++ in a string says ``__global__``
or ``__device__``. Reading the bytes costs little next to parsing, which on a library the size of
Liger-Kernel (430 Python files) is most of what init spent.
"""
from __future__ import annotations

import ast
import functools
from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING

from . import init_entry
from .. import kernel_languages, pyscan

if TYPE_CHECKING:
    from .init import FoundKernel

CUDA_MARKERS = (b"__global__", b"__device__")


@functools.lru_cache(maxsize=1)
def _markers() -> tuple[bytes, ...]:
    """The text one of the kernel languages needs in a file: its top-level module's name (``triton``,
    ``cutlass``), or the name of a torch helper that compiles CUDA (``load_inline``, ``jiterator``)."""
    names: set[str] = set()
    for lang in kernel_languages.LANGUAGES:
        for qual in (*lang.decorators, *lang.calls, *lang.gpu):
            top = qual.split(".")[0]
            names.add(qual.split(".")[-1] if top == "torch" else top)
    return tuple(sorted(n.encode() for n in names)) + CUDA_MARKERS


def may_hold_kernels(source: bytes) -> bool:
    return any(m in source for m in _markers())


def _entries(repo: Path, k: FoundKernel) -> tuple[init_entry.FileEntries, ast.Module] | None:
    try:
        tree = pyscan.parse((repo / k.path).read_bytes(), k.path)
    except (OSError, pyscan.ParseError):
        return None
    return init_entry.read(tree, k.names or (k.name,)), tree


def candidates(repo: Path, found: Iterable[FoundKernel], limit: int) -> list[str]:
    """One line per kernel file: its best entry point and where it launches each kernel."""
    lines: list[str] = []
    todo = list(found)
    for k in todo[:limit]:
        lines.append(f"{k.path}: {describe(repo, k)}")
    if len(todo) > limit:
        lines.append(f"... and {len(todo) - limit} more kernel files")
    return lines


def describe(repo: Path, k: FoundKernel) -> str:
    read = _entries(repo, k) if k.path.endswith(".py") else None
    if read is None:
        return f"{k.language} kernel {k.name} (line {k.line})"
    entries, _ = read
    if entries.entries:
        best = entries.entries[0]
        first = best.launches[0]
        more = f" (+{len(best.launches) - 1} more)" if len(best.launches) > 1 else ""
        others = f"; also {', '.join(e.call for e in entries.entries[1:3])}" if len(entries.entries) > 1 else ""
        return (f"{best.call} (line {best.line}) launches {first.kernel} at line {first.line}, in {first.host}"
                f"{more}{others}")
    if entries.launches:
        launch = entries.launches[0]
        return f"{launch.kernel} launched at line {launch.line} in {launch.host} (no entry point found above it)"
    return f"{k.name} (line {k.line}), not launched in this file"


def entry_skeleton(repo: Path, k: FoundKernel, module: str, spec_path: str, func: str) -> tuple[str, str] | None:
    """The skeleton for the kernel file's best entry point, and what it is; None without one."""
    from . import init_spec

    read = _entries(repo, k)
    if read is None or not read[0].entries:
        return None
    entries, tree = read
    entry = entries.entries[0]
    reduces = init_spec.reduces(tree, set(k.names or (k.name,)), pyscan.import_aliases(tree))
    rendered = init_spec.render(entry, module, k.path, spec_path, reduces, func)
    kernels = ", ".join(sorted({launch.kernel for launch in entry.launches}))
    what = f"a spec skeleton for {entry.call} ({k.path}:{entry.line}), which launches {kernels}"
    others = [e.call for e in entries.entries[1:]]
    if others:
        what += f" (other entry points there: {', '.join(others[:4])})"
    return rendered.text, what
