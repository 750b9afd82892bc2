"""The kernel languages gpu-gate reads in Python, by the fully qualified names that define them.

One entry per language: the decorators that make a function GPU code, the calls that compile
GPU code from a string, the module prefixes whose use means GPU code, and the host-side helpers
inside those modules (``triton.cdiv``, ``ct.launch``, dtype names) that do not. Names were taken
from each project's documentation and checked against real code (Liger-Kernel, flash-attention,
TileLang, cuTile samples). :mod:`gpu_gate.kernelscan` applies the table to a syntax tree.
"""
from __future__ import annotations

import ast
import dataclasses
from collections.abc import Callable

from . import pyscan

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

_CUPY_HOST = ("asarray", "asnumpy", "array", "empty", "empty_like", "zeros", "zeros_like", "ones", "ones_like",
              "from_dlpack", "ndarray", "get_array_module", "cuda.Device", "cuda.Stream", "cuda.get_current_stream",
              "cuda.is_available", "float16", "float32", "float64", "int32", "int64", "uint8", "bool_", "dtype")

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
    # Modules whose every use may be GPU code gpu-gate cannot read (issue 38): a file that uses them and
    # defines no kernel above is unrecognised. Their compiling calls are read as inline-cuda first.
    # CuPy's array functions (cp.exp, x.sum()) run CuPy's own kernels, as torch's operators run torch's:
    # what is the repository's own GPU code there is what compiles or loads device code (cupy.fuse, the
    # driver's module loads, the compiler), and any name reached by a computed getattr (gpu_loads).
    Language("gpu-module", gpu=("cupy.fuse", "cupy.cuda.function", "cupy.cuda.driver", "cupy.cuda.compiler",
                                "cupy.cuda.nvrtc", "cupyx.jit", "cupyx.rawkernel", "pycuda", "cuda.core",
                                "torch.ops.load_library", "torch.classes.load_library"),
             host=tuple(f"cupy.{n}" for n in _CUPY_HOST)),
)

# GPU modules (not names inside one), for messages.
_MODULES = frozenset({"triton", "triton.language", "cutlass", "cutlass.cute", "cuda.tile", "tilelang",
                      "tilelang.language", "numba.cuda", "cupyx.jit", "torch.cuda.jiterator", "pycuda.compiler",
                      "helion.language", "cupy", "cupyx", "pycuda", "cuda.core"})
DECORATORS: frozenset[str] = frozenset().union(*(lang.decorators for lang in LANGUAGES))


def module_of(name: str) -> str:
    """The module a use comes from: ``cutlass.cute.kernel`` -> ``cutlass.cute``."""
    name = name.removesuffix(".*")
    known = [m for m in _MODULES if under(name, m)]
    if known:
        return max(known, key=len)
    return name.rsplit(".", 1)[0] if "." in name else name


def under(name: str, prefix: str) -> bool:
    return name == prefix or name.startswith(prefix + ".")


def language_of_decorator(name: str | None) -> Language | None:
    return next((lang for lang in LANGUAGES if name in lang.decorators), None)


def language_of_call(name: str | None) -> Language | None:
    return next((lang for lang in LANGUAGES if name in lang.calls), None)


def gpu_language(name: str) -> Language | None:
    for lang in LANGUAGES:
        if any(under(name, p) for p in lang.gpu) and not any(under(name, h) for h in lang.host):
            return lang
    return None


def star_language(module: str) -> Language | None:
    """``from M import *`` binds names gpu-gate cannot follow: M is GPU, or holds a GPU name."""
    return gpu_language(module) or next(
        (lang for lang in LANGUAGES if any(under(p, module) for p in lang.gpu)), None)
