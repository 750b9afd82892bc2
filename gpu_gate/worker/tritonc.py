"""Compile Triton kernels ahead of time for a target, without a GPU.

``triton.compile(ASTSource(fn, signature, constexprs), target=GPUTarget("cuda", cc, 32))``
lowers a ``@triton.jit`` function to PTX and a cubin on a machine with no device.
Resources are read by running ptxas ``-v`` (Triton's bundled one) on that PTX.
Works with Triton 3.6 through 3.9; triton is imported inside functions only.
"""
from __future__ import annotations

import dataclasses
import importlib
import importlib.util
import inspect
import re
import sys
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol, cast

from .. import proc
from ..cuda.nvcc import KernelResources, parse_resources

_TARGET = re.compile(r"^\s*\.target\s+(sm_\w+)", re.M)
# Best-effort types for parameters with no annotation, by name. A guess that does
# not compile is reported as "not compiled", never as the kernel's compile error.
_INT_NAME = re.compile(r"^(n|m|k|N|M|K|B|H|D|L|T|V)$|stride|numel|(^|_)(n|num|len|size|elements|rows|cols)($|_)", re.I)
_PTR_NAME = re.compile(r"ptr|^(x|y|z|a|b|c|o|out|output|input|inp|src|dst|w|weight|bias|grad\w*)$", re.I)
_ANNOTATION_TYPES = {"int": "i32", "float": "fp32", "bool": "i1"}

if TYPE_CHECKING:
    from collections.abc import Mapping
    from types import FunctionType, ModuleType

    class JitFunction(Protocol):
        """``triton.runtime.jit.JITFunction``, as far as gpu-gate reads it (Triton ships no types)."""
        fn: FunctionType  # the kernel's Python function


@dataclasses.dataclass(frozen=True)
class TritonConfig:
    signature: dict[str, str]
    constexprs: dict[str, object]
    guessed: bool = False  # the signature was derived, not given by the policy
    missing: tuple[str, ...] = ()  # constexpr parameters with no value: the kernel cannot be compiled
    options: dict[str, object] = dataclasses.field(default_factory=dict)  # num_warps, num_stages, ...


@dataclasses.dataclass(frozen=True)
class TritonBuild:
    name: str
    ptx: str
    resources: list[KernelResources]


def import_kernels(path: Path, repo_root: Path, python_path: tuple[str, ...] = ("",)) -> dict[str, JitFunction]:
    """The ``@triton.jit`` functions defined in ``path``, by name (autotune/heuristics unwrapped).
    ``python_path``: the policy's import roots (a src/ layout's ``src``), as the specs import."""
    module = _import_file(path, repo_root, python_path)
    found: dict[str, JitFunction] = {}
    for value in vars(module).values():
        fn = _unwrap(value)
        if fn is None:
            continue
        code = getattr(getattr(fn, "fn", None), "__code__", None)
        if code is not None and Path(code.co_filename).resolve() == path.resolve():
            found[fn.fn.__name__] = fn
    return found


def _dotted_root(path: Path, repo_root: Path, python_path: tuple[str, ...]) -> Path:
    """The import root ``path`` lies under: the deepest python_path entry that holds it."""
    roots = [(repo_root / rel).resolve() if rel else repo_root.resolve() for rel in (python_path or ("",))]
    under = [r for r in roots if r == path.resolve() or r in path.resolve().parents]
    return max(under, key=lambda r: len(r.parts)) if under else repo_root.resolve()


def _import_file(path: Path, repo_root: Path, python_path: tuple[str, ...] = ("",)) -> ModuleType:
    from .loader import user_path

    user_path(repo_root, python_path)  # behind the standard library, never ahead of it
    rel = path.resolve().relative_to(_dotted_root(path, repo_root, python_path)).with_suffix("")
    dotted = ".".join(rel.parts)
    if all(part.isidentifier() for part in rel.parts):
        try:
            module = importlib.import_module(dotted)
        except ImportError:
            module = None  # not importable as a package member: load the file by itself below
        if module is not None and Path(getattr(module, "__file__", "") or "").resolve() == path.resolve():
            return module
    spec = importlib.util.spec_from_file_location(f"_gpu_gate_triton_{abs(hash(dotted))}", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def _unwrap(value: object) -> JitFunction | None:
    from triton.runtime.jit import JITFunction

    for _ in range(8):
        if isinstance(value, JITFunction):
            return cast("JitFunction", value)
        value = getattr(value, "fn", None)
        if value is None:
            return None
    return None


def default_config(fn: JitFunction) -> TritonConfig:
    """A signature from annotations, parameter names and defaults; constexprs from defaults."""
    signature: dict[str, str] = {}
    constexprs: dict[str, object] = {}
    missing: list[str] = []
    for name, param in inspect.signature(fn.fn).parameters.items():
        annotation = param.annotation
        if _is_constexpr(annotation):
            signature[name] = "constexpr"
            if param.default is inspect.Parameter.empty:
                missing.append(name)
            else:
                constexprs[name] = param.default
            continue
        signature[name] = _guess_type(name, annotation)
    return TritonConfig(signature, constexprs, guessed=True, missing=tuple(missing))


def _is_constexpr(annotation: object) -> bool:
    text = annotation if isinstance(annotation, str) else getattr(annotation, "__name__", repr(annotation))
    return "constexpr" in str(text)


def _guess_type(name: str, annotation: object) -> str:
    if isinstance(annotation, str) and (annotation.startswith("*") or re.fullmatch(r"[iuf]\w*\d+|bf16|fp8\w*", annotation)):
        return annotation
    key = annotation if isinstance(annotation, str) else getattr(annotation, "__name__", "")
    if key in _ANNOTATION_TYPES:
        return _ANNOTATION_TYPES[key]
    if _INT_NAME.search(name) and not _PTR_NAME.search(name):
        return "i32"
    return "*fp32"


def config_from_options(fn: JitFunction, given: dict[str, Any]) -> TritonConfig:
    """The policy's ``{"signature": {...}, "constexprs": {...}}``, completed with defaults."""
    base = default_config(fn)
    signature = dict(base.signature)
    signature.update(given.get("signature") or {})
    constexprs = dict(base.constexprs)
    constexprs.update(given.get("constexprs", {}))
    for name in constexprs:
        signature[name] = "constexpr"
    missing = tuple(n for n, t in signature.items() if t == "constexpr" and n not in constexprs)
    guessed = not given.get("signature")
    return TritonConfig(signature, constexprs, guessed=guessed, missing=missing)


def compile_kernel(fn: JitFunction, config: TritonConfig, cc: int, *, ptxas_timeout: float = 120) -> TritonBuild:
    """Compile for ``sm_<cc>``; raises whatever Triton raises on a compile error."""
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    src = ASTSource(fn, signature=dict(config.signature), constexprs=dict(config.constexprs))
    compiled = triton.compile(src, target=GPUTarget("cuda", cc, 32), options=dict(config.options) or None)
    ptx = compiled.asm["ptx"]
    name = getattr(compiled.metadata, "name", fn.fn.__name__)
    return TritonBuild(name, ptx, ptx_resources(ptx, cc, timeout=ptxas_timeout))


def ptx_resources(ptx: str, cc: int, *, timeout: float = 120) -> list[KernelResources]:
    """Registers and spills from ``ptxas -v`` on Triton's PTX; empty when no ptxas can be found."""
    ptxas = triton_ptxas(cc)
    if ptxas is None:
        return []
    m = _TARGET.search(ptx)
    arch = m.group(1) if m else f"sm_{cc}"
    with tempfile.TemporaryDirectory(prefix="gpu-gate-ptx-") as tmp:
        src = Path(tmp) / "kernel.ptx"
        src.write_text(ptx)
        res = proc.run([ptxas, "-v", "-lineinfo", f"--gpu-name={arch}", str(src), "-o", str(Path(tmp) / "k.cubin")],
                       timeout=timeout)
    return parse_resources(res.stderr + res.stdout, arch) if res.ok else []


def triton_ptxas(cc: int) -> str | None:
    try:
        from triton.backends.nvidia import compiler as nvidia
    except ImportError:
        return None
    getter = getattr(nvidia, "get_ptxas", None)
    try:
        tool = getter(cc) if getter is not None else None
        path = getattr(tool, "path", None)
    except Exception:  # noqa: BLE001 - a Triton without a bundled ptxas: resources are then unknown
        path = None
    if path:
        return str(path)
    bundled = Path(nvidia.__file__).parent / "bin" / "ptxas"
    return str(bundled) if bundled.is_file() else None


def launched_config(fn: JitFunction, constexprs: Mapping[str, object], signature: dict[str, str],
                    options: Mapping[str, object] | None = None) -> TritonConfig:
    """The configuration of a recorded launch (see :mod:`.tritonlaunch`): every value known."""
    full: dict[str, str] = {}
    for name in inspect.signature(fn.fn).parameters:
        full[name] = "constexpr" if name in constexprs else signature.get(name, "constexpr")
    return TritonConfig(full, dict(constexprs), guessed=False, options=dict(options or {}))
