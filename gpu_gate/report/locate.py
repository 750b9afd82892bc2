"""Where a finding that names no line belongs in the source: the spec and the kernels it judged.

An equivalence failure is about a spec and the kernels it calls, not about one line; a reviewer looks
for it at the kernel's definition (the ``@triton.jit`` function, the ``__global__`` function) and at
the spec. Sources are read from the checkout; what cannot be read or parsed is simply not located.
The check run's annotations and SARIF's regions both place findings with :func:`places`.
"""
from __future__ import annotations

import ast
import dataclasses
from collections.abc import Iterable
from pathlib import Path

from ..cuda.names import cuda_kernel_names
from ..pyscan import ParseError, find_triton_kernels

MAX_KERNELS_PER_FILE = 3  # a file of twenty kernels gets its first three, not twenty annotations


@dataclasses.dataclass(frozen=True)
class Place:
    path: str  # repository-relative
    line: int  # 1-based
    what: str  # "the spec rmsnorm_gate", "kernel add_kernel"


def _read(root: Path, rel: str) -> str | None:
    path = (root / rel).resolve()
    try:
        path.relative_to(root.resolve())  # never outside the checkout
        return path.read_text(encoding="utf-8", errors="replace")
    except (OSError, ValueError):
        return None


def spec_line(root: Path, spec_id: str) -> tuple[str, int] | None:
    """(file, line of the spec's decorator) for ``FILE::NAME``."""
    rel, sep, name = spec_id.partition("::")
    source = _read(root, rel) if sep else None
    if source is None:
        return None
    try:
        tree = ast.parse(source, filename=rel)
    except (SyntaxError, ValueError):
        return None
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name == name:
            return rel, min([d.lineno for d in node.decorator_list] + [node.lineno])
    return None


def kernel_lines(root: Path, rel: str) -> list[tuple[str, int, str]]:
    """(file, line, kernel name) of the kernels defined in ``rel``."""
    source = _read(root, rel)
    if source is None:
        return []
    if rel.endswith(".py"):
        try:
            found = [(k.line, k.name) for k in find_triton_kernels(source, rel)]
        except ParseError:
            return []
    else:
        found = [(k.line, k.name) for k in cuda_kernel_names(source)]
    return [(rel, line, name) for line, name in found[:MAX_KERNELS_PER_FILE]]


def places(root: Path, spec_id: str | None, kernels: Iterable[str]) -> list[Place]:
    """The spec's decorator line first, then the definitions of ``kernels``, as far as they are found."""
    out: list[Place] = []
    where = spec_line(root, spec_id) if spec_id else None
    if where and spec_id:
        out.append(Place(*where, f"the spec {spec_id.partition('::')[2]}"))
    for rel in kernels:
        out += [Place(f, line, f"kernel {name}") for f, line, name in kernel_lines(root, rel)]
    return out
