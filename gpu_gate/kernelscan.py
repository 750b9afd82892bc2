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
"""
from __future__ import annotations

import ast
import dataclasses
import re
from collections.abc import Callable, Iterable

from . import pyscan
from .cuda.names import blank_comments_and_strings, cuda_kernel_names
from .pyscan import ParseError

# A predicate on a call (or on a decorator's call): True it defines GPU code, False it does not,
# None it cannot be told statically (``**kwargs``): then it is a GPU reference, not a kernel.
Predicate = Callable[[ast.Call | None], bool | None]


def _always(_call: ast.Call | None) -> bool | None:
    return True


@dataclasses.dataclass(frozen=True)
class Language:
    name: str  # the ChangedKernel.language value
    decorators: frozenset[str] = frozenset()  # qualified names that make a function GPU code
    calls: frozenset[str] = frozenset()  # qualified callables that compile GPU code from a string
    gpu: tuple[str, ...] = ()  # qualified-name prefixes whose use means GPU code
    host: tuple[str, ...] = ()  # prefixes inside ``gpu`` that are host-side helpers
    when: Predicate = _always  # applies to every decorator and call of this language


def _target_is_gpu(call: ast.Call | None) -> bool | None:
    """``@numba.vectorize([...], target="cuda")``: only the CUDA target makes GPU code."""
    if call is None:
        return False
    for kw in call.keywords:
        if kw.arg == "target":
            if isinstance(kw.value, ast.Constant):
                return kw.value.value in ("cuda", "gpu")
            return None
        if kw.arg is None:  # **options
            return None
    return False


def _has_cuda_sources(call: ast.Call | None) -> bool | None:
    """``load_inline(name, cpp_sources, cuda_sources=...)``: without CUDA sources it builds C++ only."""
    if call is None:
        return None
    given: ast.expr | None = call.args[2] if len(call.args) > 2 else None
    for kw in call.keywords:
        if kw.arg == "cuda_sources":
            given = kw.value
        elif kw.arg is None and given is None:
            return None
    if any(isinstance(a, ast.Starred) for a in call.args) and given is None:
        return None
    if given is None:
        return False
    empty = isinstance(given, ast.Constant) and not given.value
    empty |= isinstance(given, (ast.List, ast.Tuple)) and not given.elts
    return not empty


_TL_DTYPES = ("float16", "float32", "float64", "bfloat16", "int1", "int8", "int16", "int32", "int64",
              "uint8", "uint16", "uint32", "uint64", "float8e4nv", "float8e5", "float8e4b15")
_TILELANG_DTYPES = ("dtype", "bool", "float16", "bfloat16", "float32", "float64", "int8", "int16", "int32", "int64",
                    "uint8", "uint16", "uint32", "uint64", "float8_e4m3", "float8_e5m2", "float8_e4m3fn", "float8_e5m2fn")
_CUTLASS_DTYPES = ("Boolean", "Float16", "BFloat16", "Float32", "Float64", "TFloat32", "Float8E4M3FN", "Float8E5M2",
                   "Float8E8M0FNU", "Float4E2M1FN", "Int4", "Int8", "Int16", "Int32", "Int64", "Uint8", "Uint16",
                   "Uint32", "Uint64")
_NUMBA_HOST = ("to_device", "device_array", "device_array_like", "pinned_array", "pinned_array_like",
               "mapped_array", "mapped_array_like", "managed_array", "is_available", "synchronize", "stream",
               "default_stream", "external_stream", "per_thread_default_stream", "legacy_default_stream",
               "as_cuda_array", "is_cuda_array", "get_current_device", "select_device", "close", "detect",
               "current_context", "gpus", "event", "pinned", "mapped", "defer_cleanup", "profile_start",
               "profile_stop", "profiling", "list_devices", "devices", "cudadrv", "errors")

LANGUAGES: tuple[Language, ...] = (
    Language("triton", decorators=pyscan.TRITON_DECORATORS, gpu=("triton",), host=(
        "triton.cdiv", "triton.next_power_of_2", "triton.Config", "triton.testing", "triton.runtime.driver",
        "triton.__version__", "triton.knobs", "triton.compile", "triton.compiler", "triton.backends",
        "triton.runtime.cache", "triton.ops",
        *(f"triton.language.{t}" for t in _TL_DTYPES))),
    # dsl_user_op marks a device-side helper op (``from cutlass.cutlass_dsl import dsl_user_op``).
    Language("cute", decorators=frozenset({"cutlass.cute.kernel", "cutlass.cute.jit",
                                           "cutlass.cutlass_dsl.dsl_user_op"}), gpu=("cutlass",), host=(
        "cutlass.cute.compile", "cutlass.cute.runtime", "cutlass.cute.testing", "cutlass.cute.typing",
        "cutlass.cute.sym_int", "cutlass.cute.sym_int64", "cutlass.torch", "cutlass.cuda", "cutlass.__version__", "cutlass.Constexpr",
        "cutlass.Numeric", "cutlass.utils.HardwareInfo", "cutlass.utils.get_smem_capacity_in_bytes",
        "cutlass.base_dsl.arch", "cutlass.cutlass_dsl.JitCompiledFunction", "cutlass.cutlass_dsl.cuda_jit_executor",
        *(f"cutlass.{t}" for t in _CUTLASS_DTYPES))),
    Language("cutile", decorators=frozenset({"cuda.tile.kernel", "cuda.tile.function"}), gpu=("cuda.tile",),
             host=("cuda.tile.launch", "cuda.tile.cdiv", "cuda.tile.tune", "cuda.tile.compiler_timeout")),
    Language("tilelang", decorators=frozenset({
        "tilelang.jit", "tilelang.lazy_jit", "tilelang.autotune", "tilelang.language.prim_func",
        "tilelang.language.macro", "tilelang.prim_func"}), gpu=("tilelang",), host=(
        "tilelang.compile", "tilelang.par_compile", "tilelang.cache", "tilelang.env", "tilelang.disable_cache",
        "tilelang.set_log_level", "tilelang.__version__", "tilelang.testing", "tilelang.profiler", "tilelang.utils",
        *(f"tilelang.language.{t}" for t in _TILELANG_DTYPES))),
    Language("numba-cuda", decorators=frozenset({"numba.cuda.jit", "numba.cuda.reduce", "numba.cuda.Reduce"}),
             calls=frozenset({"numba.cuda.jit_module"}), gpu=("numba.cuda",),
             host=tuple(f"numba.cuda.{n}" for n in _NUMBA_HOST)),
    # numba's own decorators make GPU code only with target="cuda"; numba.jit alone is the CPU compiler.
    Language("numba-cuda", decorators=frozenset({
        "numba.jit", "numba.njit", "numba.vectorize", "numba.guvectorize", "numba.np.ufunc.vectorize",
        "numba.np.ufunc.guvectorize"}), when=_target_is_gpu),
    Language("inline-cuda", calls=frozenset({"torch.utils.cpp_extension.load_inline"}), when=_has_cuda_sources,
             gpu=("torch.utils.cpp_extension.load_inline",)),
    Language("inline-cuda", calls=frozenset({
        "cupy.RawKernel", "cupy.RawModule", "cupy.ElementwiseKernel", "cupy.ReductionKernel",
        "torch.cuda.jiterator._create_jit_fn", "torch.cuda.jiterator._create_multi_output_jit_fn",
        "pycuda.compiler.SourceModule", "cuda.core.experimental.Program", "cuda.core.Program"}),
        gpu=("cupy.RawKernel", "cupy.RawModule", "cupy.ElementwiseKernel", "cupy.ReductionKernel",
             "torch.cuda.jiterator", "pycuda.compiler", "cuda.core.experimental.Program", "cuda.core.Program")),
    Language("cupy-jit", decorators=frozenset({"cupyx.jit.rawkernel"}), gpu=("cupyx.jit",)),
    Language("warp", decorators=frozenset({"warp.kernel", "warp.func", "warp.func_native", "warp.func_grad",
                                           "warp.func_replay"}),
             gpu=("warp.kernel", "warp.func", "warp.Kernel", "warp.context.Kernel")),
    Language("helion", decorators=frozenset({"helion.kernel"}), gpu=("helion.kernel", "helion.Kernel",
                                                                        "helion.language")),
)

# GPU modules (not names inside one), for messages.
_MODULES = frozenset({"triton", "triton.language", "cutlass", "cutlass.cute", "cuda.tile", "tilelang",
                      "tilelang.language", "numba.cuda", "cupyx.jit", "torch.cuda.jiterator", "pycuda.compiler",
                      "helion.language"})
_DECORATORS: frozenset[str] = frozenset().union(*(lang.decorators for lang in LANGUAGES))


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
        return sorted({_module_of(u.name) for u in self.gpu_uses})


def _module_of(name: str) -> str:
    """The module a use comes from: ``cutlass.cute.kernel`` -> ``cutlass.cute``."""
    name = name.removesuffix(".*")
    known = [m for m in _MODULES if _under(name, m)]
    if known:
        return max(known, key=len)
    return name.rsplit(".", 1)[0] if "." in name else name


def _under(name: str, prefix: str) -> bool:
    return name == prefix or name.startswith(prefix + ".")


def _language_of_decorator(name: str | None) -> Language | None:
    return next((lang for lang in LANGUAGES if name in lang.decorators), None)


def _language_of_call(name: str | None) -> Language | None:
    return next((lang for lang in LANGUAGES if name in lang.calls), None)


def _gpu_language(name: str) -> Language | None:
    for lang in LANGUAGES:
        if any(_under(name, p) for p in lang.gpu) and not any(_under(name, h) for h in lang.host):
            return lang
    return None


def _star_language(module: str) -> Language | None:
    """``from M import *`` binds names gpu-gate cannot follow: M is GPU, or holds a GPU name."""
    return _gpu_language(module) or next(
        (lang for lang in LANGUAGES if any(_under(p, module) for p in lang.gpu)), None)


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
        for dec in fn.decorator_list:
            call = dec if isinstance(dec, ast.Call) else None
            if call is not None:
                self.decorator_calls.add(id(call))
            qual = pyscan.qualified_name(dec, self.aliases)
            lang = _language_of_decorator(qual)
            if lang is None or qual is None:
                continue
            verdict = lang.when(call)
            if verdict is not None:
                self.consumed.add(id(call.func if call is not None else dec))
            if verdict:
                self._add(Kernel(fn.name, dec.lineno, lang.name, qual))

    def _call(self, call: ast.Call) -> None:
        applied: ast.expr | None = None
        head: ast.Call | None = call
        func = call.func
        if isinstance(func, ast.Call):  # `cuda.jit("void(float32[:])")(f)`: a decorator applied by hand
            self.decorator_calls.add(id(func))
            applied = call.args[0] if call.args else None
            head, func = func, func.func
        qual = pyscan.qualified_name(func, self.aliases)
        lang = _language_of_decorator(qual) or _language_of_call(qual)
        if lang is None or qual is None:
            return
        verdict = lang.when(head)
        if verdict is not None:
            self.consumed.add(id(func))
        if verdict:
            self._add(Kernel(self._call_name(call, qual, applied), call.lineno, lang.name, qual))

    def _call_name(self, call: ast.Call, qual: str, applied: ast.expr | None) -> str:
        """The kernel's name: the function made into a kernel, the literal name given, or what it is bound to."""
        if applied is None and qual in _DECORATORS and call.args:
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
                lang = _gpu_language(qual) if qual else None
                if lang is not None and qual is not None:
                    yield GpuUse(qual, node.lineno, lang.name)
            elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
                # `from triton.language import *`: the names it binds cannot be followed.
                lang = _star_language(node.module)
                if lang is not None and any(a.name == "*" for a in node.names):
                    yield GpuUse(f"{node.module}.*", node.lineno, lang.name)
            elif isinstance(node, ast.Call):
                literal = pyscan._import_module_literal(node)  # importlib.import_module("tilelang")
                lang = _gpu_language(literal) if literal else None
                if lang is not None and literal is not None:
                    yield GpuUse(literal, node.lineno, lang.name)


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


__all__ = ["LANGUAGES", "GpuUse", "Kernel", "Language", "ParseError", "Scan", "scan", "scan_tree"]
