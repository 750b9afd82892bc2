"""Raw ``.cu`` kernels for gate specs: compiled with NVRTC, launched through CuPy.

The program is named after its repo-relative path, so compile errors and the
line information that compute-sanitizer reports (``-lineinfo``) point at the
user's file. NVRTC compiles without a GPU (:func:`compile_ptx`, :func:`compile_cubin`);
launching needs one. torch tensors are passed as raw device pointers (no copy, any
dtype, bf16 included), on torch's current stream.

Python ``int``/``float`` arguments are refused: the kernel's parameter width is
not known here, and a 64-bit value read as an ``int`` is a silent bug. Wrap them:
``gg.cuda.int32(n)``, ``gg.cuda.float32(eps)`` (numpy scalars are accepted too).
"""
from __future__ import annotations

import dataclasses
import os
import shutil
import tempfile
import threading
import warnings
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy

from ..cuda.nvcc import Diagnostic, parse_diagnostics

if TYPE_CHECKING:
    from collections.abc import Callable
    from types import ModuleType
    from typing import TypeGuard

    import torch

int32 = numpy.int32
int64 = numpy.int64
uint32 = numpy.uint32
uint64 = numpy.uint64
float32 = numpy.float32
float64 = numpy.float64

_LOCK = threading.Lock()
# (file, mtime_ns, kernel name, cc, include dirs, options, name expressions) -> the loaded kernel
_CACHE: dict[tuple[str, int, str, str, tuple[str, ...], tuple[str, ...], tuple[str, ...]], Kernel] = {}
_WORKDIR: list[Path] = []


class NvrtcCompileError(Exception):
    """NVRTC rejected the source. ``diagnostics`` hold file:line for each error."""

    def __init__(self, path: str, log: str, diagnostics: list[Diagnostic]) -> None:
        self.path = path
        self.log = log
        self.diagnostics = diagnostics
        first = next((d for d in diagnostics if d.severity == "error"), None)
        where = f"{first.file}:{first.line}: {first.message}" if first else f"{path}: {log.strip()[:300]}"
        super().__init__(f"NVRTC could not compile {where}")


def repo_root() -> Path:
    """The repository that spec paths are relative to: ``$GPU_GATE_REPO_ROOT``, else the working directory."""
    return Path(os.environ.get("GPU_GATE_REPO_ROOT") or os.getcwd())


def disable_pools() -> None:
    """Turn CuPy's device and pinned memory pools off.

    The worker calls this under compute-sanitizer: an out-of-bounds access that
    lands inside a pool's slab is valid memory to memcheck, so it goes unseen.
    """
    import cupy

    cupy.cuda.set_allocator(None)
    cupy.cuda.set_pinned_memory_allocator(None)


def cuda_include_dirs() -> list[str]:
    """Where the CUDA headers (``cuda_runtime.h``, ``<cuda/std/...>``) are, for NVRTC's ``-I``."""
    roots = [os.environ.get("CUDA_HOME"), os.environ.get("CUDA_PATH"), "/usr/local/cuda"]
    nvcc = shutil.which("nvcc")
    if nvcc:
        roots.append(str(Path(nvcc).resolve().parent.parent))
    dirs = []
    for root in filter(None, roots):
        inc = Path(root) / "include"
        if (inc / "cuda_runtime.h").is_file() and str(inc) not in dirs:
            dirs.append(str(inc))
    return dirs


def nvrtc_options(path: Path, root: Path, arch: str, include_dirs: Sequence[str], options: Sequence[str]) -> list[str]:
    incs = [str(root / d) for d in include_dirs] + [str(path.parent), str(root)] + cuda_include_dirs()
    return ["-lineinfo", "-std=c++17", f"--gpu-architecture={arch}", *(f"-I{d}" for d in incs), *options]


def _resolve(path: str | os.PathLike[str]) -> tuple[Path, str, Path]:
    root = repo_root()
    full = Path(path) if Path(path).is_absolute() else root / path
    try:
        rel = full.resolve().relative_to(root.resolve()).as_posix()
    except ValueError:
        rel = str(full)
    return full, rel, root


def _compile(path: str | os.PathLike[str], arch: str, include_dirs: Sequence[str], options: Sequence[str],
             name_expressions: Sequence[str] = (), want: str = "ptx") -> tuple[bytes, dict[str, str]]:
    from cupy.cuda import nvrtc

    full, rel, root = _resolve(path)
    source = full.read_text()
    prog = nvrtc.createProgram(source, rel, [], [])
    try:
        for expr in name_expressions:
            nvrtc.addNameExpression(prog, expr)
        try:
            nvrtc.compileProgram(prog, nvrtc_options(full, root, arch, include_dirs, options))
        except nvrtc.NVRTCError as exc:
            log = nvrtc.getProgramLog(prog)
            raise NvrtcCompileError(rel, log or str(exc), parse_diagnostics(log, root)) from None
        binary = nvrtc.getCUBIN(prog) if want == "cubin" else nvrtc.getPTX(prog)
        lowered = {expr: nvrtc.getLoweredName(prog, expr) for expr in name_expressions}
    finally:
        nvrtc.destroyProgram(prog)
    return (binary if isinstance(binary, bytes) else bytes(binary, "utf-8")), lowered


def compile_ptx(path: str | os.PathLike[str], arch: str | int = 90, include_dirs: Sequence[str] = (),
                options: Sequence[str] = ()) -> str:
    """PTX for ``compute_<arch>``; needs no GPU. Raises :class:`NvrtcCompileError` with file:line findings."""
    ptx, _ = _compile(path, f"compute_{_cc(arch)}", include_dirs, options)
    return ptx.decode()


def compile_cubin(path: str | os.PathLike[str], arch: str | int, include_dirs: Sequence[str] = (),
                  options: Sequence[str] = (), name_expressions: Sequence[str] = ()) -> tuple[bytes, dict[str, str]]:
    """A cubin for ``sm_<arch>`` and the lowered (mangled) names of ``name_expressions``; needs no GPU."""
    return _compile(path, f"sm_{_cc(arch)}", include_dirs, options, name_expressions, want="cubin")


def _cc(arch: str | int) -> str:
    return str(arch).lower().removeprefix("sm_").removeprefix("compute_")


def _device_cc() -> str:
    import cupy

    return str(cupy.cuda.Device().compute_capability)


def load(path: str | os.PathLike[str], kernel_name: str, *, include_dirs: Sequence[str] = (),
         arch: str | int | None = None, options: Sequence[str] = (),
         name_expressions: Sequence[str] | None = None) -> Kernel:
    """Compile ``path`` (repo-relative) and return its kernel ``kernel_name``, ready to launch.

    ``kernel_name`` is the ``extern "C"`` name, or a C++ name expression such as
    ``"scale<2>"`` (it is added to ``name_expressions`` and looked up lowered).
    Compiled once per process for the same file contents and options.
    """
    cc = _cc(arch) if arch is not None else _device_cc()
    full, rel, _root = _resolve(path)
    exprs = tuple(name_expressions or ())
    needs_lowering = kernel_name in exprs or not kernel_name.isidentifier()
    if needs_lowering and kernel_name not in exprs:
        exprs += (kernel_name,)
    key = (str(full), full.stat().st_mtime_ns, kernel_name, cc, tuple(include_dirs), tuple(options), exprs)
    with _LOCK:
        if key not in _CACHE:
            cubin, lowered = compile_cubin(full, cc, include_dirs, options, exprs)
            symbol = lowered.get(kernel_name, kernel_name)
            _CACHE[key] = Kernel(_load_function(cubin, symbol), kernel_name, symbol, rel)
        return _CACHE[key]


def _load_function(cubin: bytes, symbol: str) -> Any:
    import cupy

    if not _WORKDIR:
        _WORKDIR.append(Path(tempfile.mkdtemp(prefix="gpu-gate-nvrtc-")))
    target = _WORKDIR[0] / f"k{len(list(_WORKDIR[0].iterdir()))}.cubin"
    target.write_bytes(cubin)
    return cupy.RawModule(path=str(target)).get_function(symbol)


@dataclasses.dataclass
class Kernel:
    """A loaded kernel. ``kernel(grid, block, *args, shared_mem=0, stream=None)`` launches it."""

    function: Callable[..., object]  # cupy.RawKernel
    name: str
    symbol: str  # the name in the cubin (mangled for C++ kernels)
    file: str  # repo-relative source path

    def __call__(self, grid: int | tuple[int, ...], block: int | tuple[int, ...], *args: object,
                 shared_mem: int = 0, stream: object = None) -> None:
        converted = tuple(_kernel_arg(i, a) for i, a in enumerate(args))
        from .launches import record_cuda

        record_cuda(os.path.join(repo_root(), self.file), self.name)
        with _as_cupy_stream(stream):
            self.function(_dims(grid), _dims(block), converted, shared_mem=shared_mem)


def _dims(d: int | tuple[int, ...]) -> tuple[int, ...]:
    return (int(d),) if isinstance(d, int) else tuple(int(x) for x in d)


def _kernel_arg(index: int, value: object) -> object:
    if isinstance(value, (bool, int, float)):
        kind = type(value).__name__
        raise TypeError(f"kernel argument {index} is a Python {kind}: its width is ambiguous; pass gg.cuda.int32(...), "
                        f"gg.cuda.int64(...), gg.cuda.float32(...) or a numpy scalar of the kernel's parameter type")
    if isinstance(value, numpy.generic):
        return value
    if _is_torch_tensor(value):
        if not value.is_cuda:
            raise TypeError(f"kernel argument {index} is a torch tensor on {value.device}; move it to the GPU first")
        # A raw pointer: no copy, and works for dtypes CuPy lacks (bfloat16, float8).
        return numpy.uint64(value.data_ptr())
    if hasattr(value, "__dlpack__") and not _is_cupy_array(value):
        import cupy

        return cupy.from_dlpack(value)
    return value


def _is_torch_tensor(value: object) -> TypeGuard[torch.Tensor]:
    torch = _torch_if_loaded()
    return torch is not None and isinstance(value, torch.Tensor)


def _is_cupy_array(value: object) -> bool:
    return type(value).__module__.startswith("cupy")


def _torch_if_loaded() -> ModuleType | None:
    import sys

    return sys.modules.get("torch")


def cupy_stream(cupy: ModuleType, stream: torch.cuda.Stream) -> Any:  # a cupy.cuda.Stream
    """A CuPy stream object for a torch stream: through the CUDA stream protocol where both
    sides have it, else ``ExternalStream`` (deprecated in newer CuPy, same stream)."""
    from_external = getattr(cupy.cuda.Stream, "from_external", None)
    if from_external is not None and hasattr(stream, "__cuda_stream__"):
        return from_external(stream)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        return cupy.cuda.ExternalStream(stream.cuda_stream)


class _as_cupy_stream:
    """Launch on ``stream`` if given, else on torch's current stream when torch is in use."""

    def __init__(self, stream: Any) -> None:
        self._stream = stream
        self._ctx: Any = None

    def __enter__(self) -> None:
        import cupy

        stream = self._stream
        if stream is None:
            torch = _torch_if_loaded()
            if torch is not None and torch.cuda.is_initialized():
                stream = torch.cuda.current_stream()
        if stream is None:
            return
        if hasattr(stream, "cuda_stream") and not isinstance(stream, cupy.cuda.Stream):
            stream = cupy_stream(cupy, stream)
        if self._stream is not None:  # the candidate chose this stream: the worker may delay it
            from .watch import before_launch

            before_launch(stream.ptr)
        self._ctx = stream
        stream.__enter__()

    def __exit__(self, *exc: object) -> None:
        if self._ctx is not None:
            self._ctx.__exit__(*exc)
