"""``#include`` lines of CUDA/C++ sources, and the include graph of a repository.

The preprocessor's own syntax is line based, so a small tokenizer is exact
enough: comments are dropped first, then ``# include "x"`` / ``<x>`` lines read.
Conditional compilation is ignored on purpose: an include under ``#if`` may be
compiled on some target, so it counts.
"""
from __future__ import annotations

import posixpath
import re
from collections.abc import Iterable, Mapping

C_SUFFIXES = (".cu", ".cuh", ".h", ".hh", ".hpp", ".hxx", ".inl", ".inc", ".c", ".cc", ".cpp", ".cxx")
KERNEL_SUFFIXES = (".cu", ".cuh")

_COMMENT_OR_STRING = re.compile(r'//[^\n]*|/\*.*?\*/|"(?:\\.|[^"\\\n])*"', re.S)
_INCLUDE = re.compile(r'^[ \t]*#[ \t]*include[ \t]*(?:"([^"\n]+)"|<([^>\n]+)>)', re.M)


def _strip_comments(text: str) -> str:
    # String literals are matched too, so that "//" inside one is not a comment;
    # they are kept as they are, comments become one space (newlines kept for line numbers).
    def repl(m: re.Match[str]) -> str:
        s = m.group(0)
        if s.startswith('"'):
            return s
        return " " + "\n" * s.count("\n")
    return _COMMENT_OR_STRING.sub(repl, text.replace("\\\n", ""))


def includes(source: str | bytes) -> list[str]:
    """The header names this source includes, in order (``"x.cuh"`` and ``<x.cuh>`` alike)."""
    text = source.decode("utf-8", "replace") if isinstance(source, bytes) else source
    if "include" not in text:
        return []
    return [q or a for q, a in _INCLUDE.findall(_strip_comments(text))]


def resolve_include(name: str, including: str, include_dirs: Iterable[str], files: frozenset[str]) -> str | None:
    """The repository file an include names, or None (a system header, or missing)."""
    # Generous on purpose: a header reached by any plausible search path counts as
    # included, because a missed dependency would let a change through unchecked.
    for directory in (posixpath.dirname(including), *include_dirs, ""):
        cand = posixpath.normpath(posixpath.join(directory, name))
        if cand in files:
            return cand
    return None


def include_graph(sources: Mapping[str, bytes], include_dirs: Iterable[str], files: frozenset[str]) -> dict[str, set[str]]:
    """Reverse include graph: header -> the files that include it directly."""
    dirs = [d.strip("/") for d in include_dirs]
    included_by: dict[str, set[str]] = {}
    for path, text in sources.items():
        for name in includes(text):
            target = resolve_include(name, path, dirs, files)
            if target and target != path:
                included_by.setdefault(target, set()).add(path)
    return included_by


def includers(header: str, included_by: Mapping[str, set[str]]) -> set[str]:
    """Every file that includes ``header``, directly or through other headers."""
    seen: set[str] = set()
    todo = [header]
    while todo:
        for parent in included_by.get(todo.pop(), ()):
            if parent not in seen and parent != header:
                seen.add(parent)
                todo.append(parent)
    return seen


def is_c_source(path: str) -> bool:
    return path.endswith(C_SUFFIXES)
