"""Where a finding that names no line belongs in the source: the lines the change wrote, the spec
and the kernels it judged.

An equivalence failure is about a spec and the kernels it calls, not about one line; a reviewer looks
for it at the kernel's definition (the ``@triton.jit`` function, the ``__global__`` function) and at
the spec. Sources are read from the checkout; what cannot be read or parsed is simply not located.
The check run's annotations and SARIF's regions both place findings with :func:`places`.
"""
from __future__ import annotations

import ast
import dataclasses
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path

from ..cuda.names import cuda_kernel_names
from ..pyscan import ParseError, find_triton_kernels

MAX_KERNELS_PER_FILE = 3  # a file of twenty kernels gets its first three, not twenty annotations


MAX_HUNKS_PER_FILE = 3  # the change's first three hunks in each file


@dataclasses.dataclass(frozen=True)
class Place:
    path: str  # repository-relative
    line: int  # 1-based
    what: str  # "the spec rmsnorm_gate", "kernel add_kernel", "changed lines 64-66"
    end: int | None = None  # last line of a range (a hunk of the change)


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


def places(root: Path, spec_id: str | None, kernels: Iterable[str],
           changed: Mapping[str, Sequence[Sequence[int]]] | None = None) -> list[Place]:
    """Where a failure of a spec's job belongs: first the lines this change wrote in the files the
    spec runs (``changed``: file -> line ranges; the diff view shows annotations there), then the
    spec's decorator line, then the definitions of ``kernels``, as far as they are found."""
    out: list[Place] = []
    for rel, ranges in sorted((changed or {}).items()):
        for first, last in [tuple(r) for r in ranges][:MAX_HUNKS_PER_FILE]:
            what = f"changed line {first}" if first == last else f"changed lines {first}-{last}"
            out.append(Place(rel, int(first), what, int(last) if last != first else None))
    where = spec_line(root, spec_id) if spec_id else None
    if where and spec_id:
        out.append(Place(*where, f"the spec {spec_id.partition('::')[2]}"))
    for rel in kernels:
        out += [Place(f, line, f"kernel {name}") for f, line, name in kernel_lines(root, rel)]
    unique: dict[tuple[str, int], Place] = {}
    for p in out:
        unique.setdefault((p.path, p.line), p)
    return list(unique.values())


def recorded(places: list[Place]) -> list[dict[str, object]]:
    """Places as the run record keeps them."""
    return [{"path": p.path, "line": p.line, "end": p.end, "what": p.what} for p in places]


def job_places(root: Path, kept: Sequence[Mapping[str, object]] | None, spec_id: str | None,
               kernels: Iterable[str], changed: Mapping[str, Sequence[Sequence[int]]] | None = None) -> list[Place]:
    """The places recorded for the job when it ran (``kept``, read from the head's tree), else
    found now in the checkout at ``root``."""
    if kept:
        out = []
        for d in kept:
            path, line, end = d.get("path"), d.get("line"), d.get("end")
            if isinstance(path, str) and isinstance(line, int) and line > 0:
                out.append(Place(path, line, str(d.get("what") or ""), end if isinstance(end, int) else None))
        if out:
            return out
    return places(root, spec_id, kernels, changed)
