"""GPU kernels in Python sources, in every kernel language gpu-gate knows, read from the syntax tree.

A kernel is found by what defines it, resolved through the file's own imports:

- a decorator: ``@triton.jit``, ``@cute.kernel`` (CuTe DSL), ``@ct.kernel`` (cuTile),
  ``@tilelang.jit`` / ``@T.prim_func`` (TileLang), ``@cuda.jit`` (Numba CUDA), ``@wp.kernel`` (Warp),
  ``@helion.kernel``, ``@jit.rawkernel`` (CuPy JIT); the same names called on a function
  (``k = cuda.jit(f)``) count too;
- a call that compiles CUDA C++ from a string: ``torch.utils.cpp_extension.load_inline(cuda_sources=...)``,
  ``cupy.RawKernel`` / ``RawModule`` / ``ElementwiseKernel`` / ``ReductionKernel``, ``torch.cuda.jiterator``,
  ``pycuda.compiler.SourceModule``, ``cuda.core`` ``Program``;
- a string literal that holds CUDA C++ with ``__global__`` or ``__device__`` code (read by the CUDA
  scanner, comments and CUDA strings blanked; docstrings are documentation and are skipped): the
  source that such a call compiles may live in a module of its own.

``numba.jit`` is the CPU compiler and defines no GPU kernel (unless given ``target="cuda"``); the
text "cute.kernel" in a string or a comment is never a kernel.

A file that uses one of these GPU modules beyond its host-side helpers (``triton.cdiv``,
``ct.launch``, ``cuda.to_device``, ...) but in which no kernel is found holds GPU code that
gpu-gate cannot name: :attr:`Scan.unrecognised` says so, and change detection refuses it loudly.
The names themselves live in one table, :mod:`gpu_gate.kernel_languages`.
"""
from __future__ import annotations

import ast
import dataclasses
import re
from collections.abc import Iterable

from . import gpu_loads, pyscan
from . import kernel_languages as languages
from .cuda.names import blank_comments_and_strings, cuda_kernel_names
from .pyscan import ParseError


@dataclasses.dataclass(frozen=True)
class Kernel:
    name: str  # the function's name, or the compiled kernel's name for CUDA given as a string
    line: int
    language: str
    via: str  # what defines it, fully qualified: "cuda.tile.kernel", "cupy.RawKernel"


@dataclasses.dataclass(frozen=True)
class GpuUse:
    """A use of a GPU module that gpu-gate did not read as a kernel definition."""

    name: str  # fully qualified: "cutlass.cute.kernel", "triton.language.load"
    line: int
    language: str


@dataclasses.dataclass(frozen=True)
class Scan:
    kernels: tuple[Kernel, ...]
    gpu_uses: tuple[GpuUse, ...]

    @property
    def language(self) -> str | None:
        """The file's kernel language; several are joined with ``+`` (``"cute+triton"``)."""
        names = sorted({k.language for k in self.kernels})
        return "+".join(names) if names else None

    @property
    def unrecognised(self) -> bool:
        """GPU code is used here, yet no kernel was found."""
        return not self.kernels and bool(self.gpu_uses)

    @property
    def gpu_modules(self) -> list[str]:
        """The GPU modules used, for messages: ``["cutlass.cute"]``."""
        return sorted({languages.module_of(u.name) for u in self.gpu_uses})


def scan(source: str | bytes, filename: str) -> Scan:
    """Kernels and GPU uses in one Python file; raises :class:`ParseError`."""
    return scan_tree(pyscan.parse(source, filename))


def scan_tree(tree: ast.Module) -> Scan:
    return _Scanner(tree).run()


class _Scanner:
    def __init__(self, tree: ast.Module) -> None:
        self.tree = tree
        self.aliases = pyscan.import_aliases(tree)
        self.kernels: dict[tuple[int, str, str], Kernel] = {}
        self.consumed: set[int] = set()  # ids of name nodes read as (or ruled out as) kernel definitions
        self.decorator_calls: set[int] = set()
        self.targets = _assignment_targets(tree)

    def run(self) -> Scan:
        for fn in pyscan.functions(self.tree):
            self._decorators(fn)
        for node in ast.walk(self.tree):
            if isinstance(node, ast.Call) and id(node) not in self.decorator_calls:
                self._call(node)
        for k in _cuda_in_strings(self.tree):
            self._add(k)
        kernels = sorted(self.kernels.values(), key=lambda k: (k.line, k.name))
        return Scan(tuple(kernels), tuple(self._gpu_uses()))

    def _decorators(self, fn: ast.FunctionDef | ast.AsyncFunctionDef) -> None:
        """One kernel per function, at its topmost kernel decorator (where Python says the function
        starts), however many it stacks: ``@triton.autotune`` over ``@triton.jit`` is one kernel."""
        found = False
        for dec in fn.decorator_list:
            call = dec if isinstance(dec, ast.Call) else None
            if call is not None:
                self.decorator_calls.add(id(call))
            qual = pyscan.qualified_name(dec, self.aliases)
            lang = languages.language_of_decorator(qual)
            if lang is None or qual is None:
                continue
            verdict = lang.when(call)
            if verdict is not None:
                self.consumed.add(id(call.func if call is not None else dec))
            if verdict and not found:
                self._add(Kernel(fn.name, dec.lineno, lang.name, qual))
                found = True

    def _call(self, call: ast.Call) -> None:
        applied: ast.expr | None = None
        head: ast.Call | None = call
        func = call.func
        if isinstance(func, ast.Call):  # `cuda.jit("void(float32[:])")(f)`: a decorator applied by hand
            self.decorator_calls.add(id(func))
            applied = call.args[0] if call.args else None
            head, func = func, func.func
        qual = pyscan.qualified_name(func, self.aliases)
        lang = languages.language_of_decorator(qual) or languages.language_of_call(qual)
        if lang is None or qual is None:
            return
        verdict = lang.when(head)
        if verdict is not None:
            self.consumed.add(id(func))
        if verdict:
            self._add(Kernel(self._call_name(call, qual, applied), call.lineno, lang.name, qual))

    def _call_name(self, call: ast.Call, qual: str, applied: ast.expr | None) -> str:
        """The kernel's name: the function made into a kernel, the literal name given, or what it is bound to."""
        if applied is None and qual in languages.DECORATORS and call.args:
            applied = call.args[0]  # `k = triton.jit(f)`
        if isinstance(applied, ast.Name):
            return applied.id
        literal = _name_argument(call, qual)
        if literal:
            return literal
        if qual.endswith(".jit_module"):
            return "<module>"
        return self.targets.get(id(call), "<inline>")

    def _add(self, k: Kernel) -> None:
        self.kernels.setdefault((k.line, k.name, k.language), k)

    def _gpu_uses(self) -> Iterable[GpuUse]:
        inner = {id(n.value) for n in ast.walk(self.tree) if isinstance(n, ast.Attribute)}
        skip = inner | self.consumed | _annotation_nodes(self.tree)
        for node in ast.walk(self.tree):
            if isinstance(node, (ast.Name, ast.Attribute)) and id(node) not in skip:
                qual = pyscan.qualified_name(node, self.aliases)
                lang = languages.gpu_language(qual) if qual else None
                if lang is not None and qual is not None:
                    yield GpuUse(qual, node.lineno, lang.name)
            elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
                # `from triton.language import *`: the names it binds cannot be followed.
                lang = languages.star_language(node.module)
                if lang is not None and any(a.name == "*" for a in node.names):
                    yield GpuUse(f"{node.module}.*", node.lineno, lang.name)
            elif isinstance(node, ast.Call):
                literal = pyscan._import_module_literal(node)  # importlib.import_module("tilelang")
                lang = languages.gpu_language(literal) if literal else None
                if lang is not None and literal is not None:
                    yield GpuUse(literal, node.lineno, lang.name)
        # libraries loaded from a path, getattr by a computed name on a GPU module (see gpu_loads)
        for name, line, language in gpu_loads.uses(self.tree, self.aliases):
            yield GpuUse(name, line, language)


# Where the compiled kernel's name is given, by callable: (positional index, keyword).
_NAME_ARGS = {"RawKernel": (1, "name"), "ElementwiseKernel": (3, "name"), "ReductionKernel": (6, "name"),
              "load_inline": (0, "name")}


def _name_argument(call: ast.Call, qual: str) -> str | None:
    where = _NAME_ARGS.get(qual.rsplit(".", 1)[-1])
    if where is None:
        return None
    index, keyword = where
    node: ast.expr | None = call.args[index] if len(call.args) > index else None
    node = next((kw.value for kw in call.keywords if kw.arg == keyword), node)
    if isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value:
        return node.value
    return None


# `__device__ float f(`, `__global__ void __launch_bounds__(256) k(`, `__device__ int counter;`: CUDA code,
# where a bare "__device__" in a list of words is none.
_CUDA_CODE = re.compile(r"\b__(?:global|device)__\s+(?:[\w:<>,]+[\s*&]+)+\w+\s*[(;=\[]")
CUDA_STRING = "CUDA source in a string"


def _cuda_in_strings(tree: ast.Module) -> list[Kernel]:
    """``__global__`` kernels (and ``__device__`` code) in string literals and f-strings, docstrings left out."""
    skip = _docstrings(tree)
    found: list[Kernel] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.JoinedStr):
            skip.update(id(v) for v in node.values)
            text = "".join(str(v.value) if isinstance(v, ast.Constant) else "_" for v in node.values)
        elif isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in skip:
            text = node.value
        else:
            continue
        if "__global__" not in text and "__device__" not in text:
            continue
        names = cuda_kernel_names(text)
        found += [Kernel(n.name, node.lineno + n.line - 1, "inline-cuda", CUDA_STRING) for n in names]
        if not names and _CUDA_CODE.search(blank_comments_and_strings(text)):
            found.append(Kernel("<cuda source>", node.lineno, "inline-cuda", CUDA_STRING))
    return found


def _docstrings(tree: ast.Module) -> set[int]:
    out: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and node.body:
            first = node.body[0]
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant):
                out.add(id(first.value))
    return out


def _annotation_nodes(tree: ast.Module) -> set[int]:
    """Nodes inside type annotations (``x: cute.Tensor``): a type names GPU code, it is none."""
    roots: list[ast.expr] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.arg) and node.annotation is not None:
            roots.append(node.annotation)
        elif isinstance(node, ast.AnnAssign):
            roots.append(node.annotation)
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.returns is not None:
            roots.append(node.returns)
    return {id(n) for root in roots for n in ast.walk(root)}


def _assignment_targets(tree: ast.Module) -> dict[int, str]:
    """id(value) -> the simple name it is assigned to (``_add = cp.RawKernel(...)`` -> ``_add``)."""
    out: dict[int, str] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Assign) and len(node.targets) == 1:
            target = node.targets[0]
        elif isinstance(node, ast.AnnAssign) and node.value is not None:
            target = node.target
        else:
            continue
        name = target.id if isinstance(target, ast.Name) else target.attr if isinstance(target, ast.Attribute) else None
        if name and node.value is not None:
            out[id(node.value)] = name
    return out


__all__ = ["GpuUse", "Kernel", "ParseError", "Scan", "scan", "scan_tree"]
