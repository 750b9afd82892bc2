"""The compile check's worker: in its sandbox, it imports a kernel file's Triton module or runs
nvcc on a CUDA file, and answers the judge with what the compilers said (:class:`CompileFacts`).

It decides nothing: which build is an error, which resource breaches the policy, what the PTX
shows, are the judge's (:mod:`gpu_gate.judge.checks.compile`). It writes no result; what the
imported module does to this process can change its answers, never the judge's verdict on them.
"""
from __future__ import annotations

import os
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .. import proc
from ..cuda import nvcc
from ..protocol import wire
from ..protocol.archs import arch_number
from ..protocol.messages import (CompileFacts, CompileReply, CompileRequest, DiagnosticFacts, ErrorReply, NvccFacts,
                                 Reply, Request, ResourceFacts, TritonBuildFacts, TritonKernelFacts, put_text)

if TYPE_CHECKING:
    from collections.abc import Mapping

    from .tritonc import JitFunction

CUDA_SUFFIXES = (".cu",)
NVCC_TAIL_LINES = 5  # of a failed build's output, where nvcc names no error


class CompileWorker:
    """Answers ``compile`` requests for the tree at ``repo_root`` (the head's, or in a pull
    request the base's, shown at the repository's path in a sandbox)."""

    def __init__(self, context: dict[str, Any], workdir: Path) -> None:
        self.repo_root = Path(context.get("repo_root") or os.getcwd())
        self.workdir = workdir

    def handle(self, request: Request, blobs: list[bytearray]) -> tuple[Reply, wire.Blobs]:
        if not isinstance(request, CompileRequest):
            return ErrorReply(request.op, "protocol", f"the compile worker answers only {CompileRequest.op!r}"), []
        out: wire.Blobs = []
        return CompileReply(compile_file(request, self.repo_root, out)), out

    def close(self) -> None:
        return None


def compile_file(request: CompileRequest, repo_root: Path, blobs: wire.Blobs) -> CompileFacts:
    """The facts of one file; the PTX texts they name are appended to ``blobs``."""
    if request.file.endswith(".py"):
        return _triton_file(request, repo_root, blobs)
    return _cuda_file(request, repo_root, blobs)


# --- CUDA ---------------------------------------------------------------------------------------


def _cuda_file(request: CompileRequest, repo_root: Path, blobs: wire.Blobs) -> CompileFacts:
    rel, root = request.file, str(repo_root)
    tool = nvcc.find_nvcc()
    if tool is None:
        return CompileFacts(rel, root, "cuda", tool_missing=(
            f"{rel}: nvcc not found (install the CUDA toolkit or set CUDA_HOME); the kernel was not compiled"))
    includes = [str(repo_root / d) for d in request.include_dirs]
    includes += [str((repo_root / rel).parent), str(repo_root)]
    flags = list(request.nvcc_flags)
    builds = []
    with tempfile.TemporaryDirectory(prefix="gpu-gate-nvcc-") as tmp:
        source = rel if rel.endswith(CUDA_SUFFIXES) else _header_tu(Path(tmp), repo_root / rel)
        for arch in request.archs:
            argv = nvcc.cubin_argv(tool, source, arch, str(Path(tmp) / f"{arch}.cubin"), includes, flags)
            builds.append(_nvcc_facts(proc.run(argv, cwd=repo_root, timeout=request.timeout_s), arch, repo_root))
        ptx = cuda_ptx(tool, source, request.read_arch, includes, flags, repo_root, request.timeout_s)
    return CompileFacts(rel, root, "cuda", nvcc=tuple(builds), ptx=put_text(ptx, blobs))


def _header_tu(tmp: Path, header: Path) -> str:
    """A header is compiled through a one-line translation unit that includes it."""
    tu = tmp / "header_check.cu"
    tu.write_text(f'#include "{header.resolve()}"\n')
    return str(tu)


def _nvcc_facts(res: proc.ProcResult, arch: str, repo_root: Path) -> NvccFacts:
    output = res.stderr + "\n" + res.stdout
    diags = tuple(DiagnosticFacts(d.file, d.line, d.severity, d.message)
                  for d in nvcc.parse_diagnostics(output, repo_root))
    resources = tuple(_resource(r) for r in nvcc.parse_resources(res.stderr + res.stdout, arch)) if res.ok else ()
    return NvccFacts(arch, res.ok, res.not_found, res.timed_out, res.describe(),
                     res.tail(NVCC_TAIL_LINES) or res.tail(NVCC_TAIL_LINES, "stdout"), diags, resources)


def _resource(r: nvcc.KernelResources) -> ResourceFacts:
    return ResourceFacts(r.kernel, r.symbol, r.arch, r.registers, r.spill_store, r.spill_load, r.local_bytes,
                         r.shared_bytes, r.constant_bytes, r.barriers)


def cuda_ptx(tool: str, source: str, arch: str, includes: list[str], flags: list[str], repo_root: Path,
             timeout: float) -> str | None:
    """The PTX of one CUDA translation unit, with line information; None where it does not build
    (the cubin build has said why)."""
    with tempfile.TemporaryDirectory(prefix="gpu-gate-ptx-") as tmp:
        out = Path(tmp) / "k.ptx"
        argv = [tool, f"-arch={arch}", "-ptx", "-lineinfo", "-std=c++17", *(f"-I{d}" for d in includes), *flags,
                source, "-o", str(out)]
        res = proc.run(argv, cwd=repo_root, timeout=timeout, env=proc.scrubbed_env())
        if not res.ok or not out.is_file():
            return None
        return out.read_text(errors="replace")


# --- Triton -------------------------------------------------------------------------------------


def _triton_file(request: CompileRequest, repo_root: Path, blobs: wire.Blobs) -> CompileFacts:
    from . import tritonc

    rel, root = request.file, str(repo_root)
    try:
        kernels = tritonc.import_kernels(repo_root / rel, repo_root, request.python_path)
    except ImportError as exc:
        if getattr(exc, "name", None) == "triton":
            return CompileFacts(rel, root, "triton",
                                tool_missing=f"{rel}: triton is not installed; the kernels were not compiled")
        return CompileFacts(rel, root, "triton", import_error=f"{type(exc).__name__}: {exc}")
    except Exception as exc:  # noqa: BLE001 - the user's module failed to import: a fact for the judge
        return CompileFacts(rel, root, "triton", import_error=f"{type(exc).__name__}: {exc}")
    facts = [_triton_kernel(name, kernels.get(name), request, blobs) for name in request.kernels]
    return CompileFacts(rel, root, "triton", kernels=tuple(facts))


def _triton_kernel(name: str, fn: JitFunction | None, request: CompileRequest, blobs: wire.Blobs) -> TritonKernelFacts:
    from . import tritonc

    if fn is None:
        return TritonKernelFacts(name, found=False)
    given = request.triton.get(name)
    config = tritonc.config_from_options(fn, given) if isinstance(given, dict) and given else \
        tritonc.default_config(fn)
    source = os.path.realpath(fn.fn.__code__.co_filename)
    base = TritonKernelFacts(name, True, source, dict(config.signature), _plain(config.constexprs), config.guessed,
                             tuple(config.missing))
    if config.missing:
        return base
    builds = []
    for arch in request.archs:
        try:
            build = tritonc.compile_kernel(fn, config, arch_number(arch))
        except Exception as exc:  # noqa: BLE001 - Triton raises many types for a compile error
            builds.append(_triton_error(arch, exc))
            if config.guessed:
                break  # the same guess fails for every arch: one answer says it
            continue
        builds.append(TritonBuildFacts(arch, True, resources=tuple(_resource(r) for r in build.resources),
                                       ptx=put_text(build.ptx, blobs) if arch == request.read_arch else None))
    return TritonKernelFacts(base.name, True, source, base.signature, base.constexprs, base.guessed, base.missing,
                             tuple(builds))


def _plain(values: Mapping[str, object]) -> dict[str, str | int | float | bool | None]:
    """Constexpr values as data: numbers, bools and text as themselves, anything else by its repr."""
    return {str(k): v if isinstance(v, (str, int, float, bool, type(None))) else repr(v)[:200]
            for k, v in values.items()}


def _triton_error(arch: str, exc: BaseException) -> TritonBuildFacts:
    lineno = getattr(getattr(exc, "node", None), "lineno", None)
    node_line = lineno if isinstance(lineno, int) and not isinstance(lineno, bool) and lineno > 0 else None
    return TritonBuildFacts(arch, False, error=str(exc).strip(), message=_triton_message(exc), node_line=node_line)


def _triton_message(exc: BaseException) -> str:
    """The error itself. Triton's message is a source excerpt with a caret under the offending
    node, then the error; where it ends at the caret, the error is the exception's cause."""
    lines = [t.strip() for t in str(exc).strip().splitlines() if t.strip()]
    if lines and not set(lines[-1]) <= set("^~ "):
        return lines[-1]
    if exc.__cause__ is not None:
        return _triton_message(exc.__cause__)
    return type(exc).__name__
