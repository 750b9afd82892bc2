"""Kernel names in CUDA and Triton sources: what the sanitizer's kernel filters select.

CUDA: ``__global__`` functions, found after comments and string literals are
blanked out (so a ``"__global__"`` inside a string or a comment is no kernel).
Triton: functions decorated with ``triton.jit`` (also under ``autotune`` or
``heuristics``), found by parsing the file, never by a regex over text. Triton
names its compiled kernel after the Python function.
"""
from __future__ import annotations

import ast
import dataclasses
import re

_IDENT = re.compile(r"[A-Za-z_]\w*")
_GLOBAL = re.compile(r"\b__global__\b")
_EXTERN_C_BLOCK = re.compile(r'\bextern\s+"C"\s*\{')
_EXTERN_C = re.compile(r'\bextern\s+"C"\s*$')
# Words that may sit between __global__ and the kernel's name and are never the name.
_NOT_NAMES = frozenset(
    {"void", "static", "inline", "__forceinline__", "__noinline__", "extern", "__device__", "__host__",
     "__launch_bounds__", "__maxnreg__", "__cluster_dims__", "__attribute__", "__declspec", "const", "auto"}
)
_TRITON_DECORATORS = frozenset({"jit", "autotune", "heuristics"})


@dataclasses.dataclass(frozen=True)
class KernelName:
    name: str  # the unmangled base name, as written in the source
    line: int  # 1-based line of the name
    extern_c: bool = False  # the symbol is not mangled
    template: bool = False


def blank_comments_and_strings(source: str) -> str:
    """The source with comments and literal contents replaced by spaces (newlines kept).

    The literal ``"C"`` survives, so that ``extern "C"`` can still be recognised.
    """
    out: list[str] = []
    i, n = 0, len(source)
    while i < n:
        c = source[i]
        two = source[i : i + 2]
        if two == "//":
            j = source.find("\n", i)
            j = n if j < 0 else j
            out.append(" " * (j - i))
            i = j
        elif two == "/*":
            j = source.find("*/", i + 2)
            j = n if j < 0 else j + 2
            out.append(_keep_newlines(source[i:j]))
            i = j
        elif c in "\"'":
            j = _end_of_literal(source, i)
            text = source[i:j]
            out.append(text if text == '"C"' else c + _keep_newlines(text[1:-1]) + c)
            i = j
        else:
            out.append(c)
            i += 1
    return "".join(out)


def _keep_newlines(text: str) -> str:
    return "".join(ch if ch == "\n" else " " for ch in text)


def _end_of_literal(source: str, start: int) -> int:
    quote, i = source[start], start + 1
    while i < len(source):
        if source[i] == "\\":
            i += 2
            continue
        if source[i] == quote or source[i] == "\n":
            return i + 1
        i += 1
    return len(source)


def cuda_kernel_names(source: str) -> list[KernelName]:
    """Every ``__global__`` function declared or defined in a CUDA source, in order, without duplicates."""
    text = blank_comments_and_strings(source)
    extern_ranges = _extern_c_blocks(text)
    seen: dict[str, KernelName] = {}
    for m in _GLOBAL.finditer(text):
        if _inside_define(text, m.start()):
            continue
        found = _name_after(text, m.end())
        if found is None:
            continue
        name, pos = found
        if name in seen:
            continue
        line_start = text.rfind("\n", 0, m.start()) + 1
        prefix = text[line_start : m.start()]
        extern_c = bool(_EXTERN_C.search(prefix.rstrip())) or any(a <= m.start() < b for a, b in extern_ranges)
        template = _is_template(text, m.start())
        seen[name] = KernelName(name, text.count("\n", 0, pos) + 1, extern_c, template)
    return list(seen.values())


def _inside_define(text: str, pos: int) -> bool:
    """True when ``pos`` is in a ``#define`` (a macro that expands to ``__global__`` names no kernel)."""
    line_start = text.rfind("\n", 0, pos) + 1
    while line_start > 1 and text[line_start - 2] == "\\":
        line_start = text.rfind("\n", 0, line_start - 1) + 1
    return text[line_start:pos].lstrip().startswith("#")


def _name_after(text: str, pos: int) -> tuple[str, int] | None:
    """The identifier right before the parameter list that follows ``pos``."""
    last: tuple[str, int] | None = None
    i = pos
    while i < len(text):
        c = text[i]
        if c.isspace() or c in "*&:":
            i += 1
        elif c == "[" and text.startswith("[[", i):
            i = _skip_balanced(text, i, "[", "]")
        elif c == "<":
            i = _skip_balanced(text, i, "<", ">")
        elif c == "(":
            if last is not None and last[0] in ("__launch_bounds__", "__attribute__", "__maxnreg__",
                                                "__cluster_dims__", "__declspec", "alignas"):
                i = _skip_balanced(text, i, "(", ")")
                last = None
                continue
            if last is None or last[0] in _NOT_NAMES:
                return None
            after = _skip_balanced(text, i, "(", ")")
            if _IDENT.match(text[after:].lstrip()):
                # An attribute-like macro, e.g. ``MY_BOUNDS(256) kernel(...)``: the name comes later.
                i, last = after, None
                continue
            return last
        else:
            m = _IDENT.match(text, i)
            if not m:
                return None
            last = (m.group(), m.start())
            i = m.end()
    return None


def _skip_balanced(text: str, i: int, open_: str, close: str) -> int:
    depth = 0
    while i < len(text):
        if text[i] == open_:
            depth += 1
        elif text[i] == close:
            depth -= 1
            if depth == 0:
                return i + 1
        elif text[i] in ";{}":
            return i
        i += 1
    return i


def _extern_c_blocks(text: str) -> list[tuple[int, int]]:
    ranges = []
    for m in _EXTERN_C_BLOCK.finditer(text):
        ranges.append((m.end(), _skip_balanced(text, m.end() - 1, "{", "}")))
    return ranges


def _is_template(text: str, pos: int) -> bool:
    """True when a ``template <...>`` header ends right before the declaration at ``pos``."""
    head = text[max(0, pos - 400) : pos]
    stmt_start = max(head.rfind(";"), head.rfind("}"), head.rfind("{"))
    return re.search(r"\btemplate\s*<", head[stmt_start + 1 :]) is not None


def triton_kernel_names(source: str) -> list[KernelName]:
    """Functions decorated with ``triton.jit`` (directly or under autotune/heuristics)."""
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return []
    found: list[KernelName] = []
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and _has_triton_decorator(node):
            found.append(KernelName(node.name, node.lineno))
    return found


def _has_triton_decorator(node: ast.FunctionDef | ast.AsyncFunctionDef) -> bool:
    for dec in node.decorator_list:
        target = dec.func if isinstance(dec, ast.Call) else dec
        if isinstance(target, ast.Attribute) and target.attr in _TRITON_DECORATORS:
            return True
        if isinstance(target, ast.Name) and target.id == "jit":
            return True
    return False


def kernel_names_in_file(path: str, source: str) -> list[KernelName]:
    """Kernel names of a CUDA (``.cu``, ``.cuh``, ``.h``...) or Triton (``.py``) file."""
    if path.endswith(".py"):
        return triton_kernel_names(source)
    return cuda_kernel_names(source)
