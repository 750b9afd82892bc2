"""nvcc: compile one CUDA file for one architecture and read what ptxas says about it.

Runs without a GPU. ``nvcc -arch=sm_XX -cubin -Xptxas -v -lineinfo`` prints, per
kernel, registers, spills, stack frame, shared and constant memory and barriers.
"""
from __future__ import annotations

import dataclasses
import os
import re
import shutil
from collections.abc import Sequence
from pathlib import Path

from .. import proc

_ENTRY = re.compile(r"Compiling entry function '([^']+)' for '(\w+)'")
_PROPS = re.compile(r"(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads")
_USED = re.compile(r"Used (\d+) registers")
_BARRIERS = re.compile(r"used (\d+) barriers")
_SMEM = re.compile(r"(\d+) bytes smem")
_CMEM = re.compile(r"(\d+) bytes cmem\[(\d+)\]")
# "csrc/a.cu(12): error: ..." (cudafe, NVRTC) and "csrc/a.cu:12:3: error: ..." (the host compiler).
_DIAG_PAREN = re.compile(r"^(?P<file>[^\s(][^(]*?)\((?P<line>\d+)\): (?P<sev>catastrophic error|error|warning)(?: #[\w-]+)?: (?P<msg>.*)$")
_DIAG_COLON = re.compile(r"^(?P<file>[^\s:][^:]*):(?P<line>\d+):(?:\d+:)? (?P<sev>fatal error|error|warning): (?P<msg>.*)$")
_PTXAS_ERR = re.compile(r"^ptxas (?:fatal|error)\s*: (?P<msg>.*)$")


@dataclasses.dataclass(frozen=True)
class KernelResources:
    kernel: str  # readable name (demangled where possible)
    symbol: str  # the symbol as ptxas printed it (mangled for C++ kernels)
    arch: str
    registers: int = 0
    spill_store: int = 0
    spill_load: int = 0
    local_bytes: int = 0  # stack frame: local memory per thread
    shared_bytes: int = 0
    constant_bytes: int = 0
    barriers: int = 0

    def to_json(self) -> dict[str, object]:
        return dataclasses.asdict(self)


@dataclasses.dataclass(frozen=True)
class Diagnostic:
    file: str | None
    line: int | None
    severity: str  # "error" | "warning"
    message: str


def toolkit_candidates(tool: str) -> list[Path]:
    """Where a CUDA toolkit program is looked for, in order: ``$CUDA_HOME/bin``,
    ``$CUDA_PATH/bin``, ``PATH``, then ``/usr/local/cuda/bin``."""
    out = [Path(os.environ[var]) / "bin" / tool for var in ("CUDA_HOME", "CUDA_PATH") if os.environ.get(var)]
    found = shutil.which(tool)
    if found:
        out.append(Path(found))
    out.append(Path("/usr/local/cuda/bin") / tool)
    return out


def find_nvcc() -> str | None:
    """nvcc from ``$CUDA_HOME/bin``, then ``PATH``, then ``/usr/local/cuda/bin``."""
    for path in toolkit_candidates("nvcc"):
        if path.is_file() and os.access(path, os.X_OK):
            return str(path)
    return None


def cubin_argv(
    nvcc: str, source: str, arch: str, out: str, include_dirs: Sequence[str] = (), extra: Sequence[str] = ()
) -> list[str]:
    argv = [nvcc, f"-arch={arch}", "-cubin", "-Xptxas", "-v", "-lineinfo", "-std=c++17"]
    argv += [f"-I{d}" for d in include_dirs]
    return [*argv, *extra, "-o", out, source]


def parse_resources(text: str, default_arch: str = "") -> list[KernelResources]:
    """Per-kernel resources from ``ptxas -v`` output (nvcc prints it on stderr)."""
    kernels: list[dict[str, object]] = []
    current: dict[str, object] | None = None
    for line in text.splitlines():
        m = _ENTRY.search(line)
        if m:
            current = {"symbol": m.group(1), "arch": m.group(2) or default_arch}
            kernels.append(current)
            continue
        if current is None:
            continue
        props = _PROPS.search(line)
        if props:
            current["local_bytes"], current["spill_store"], current["spill_load"] = map(int, props.groups())
        used = _USED.search(line)
        if used:
            current["registers"] = int(used.group(1))
            _read_used_line(line, current)
    names = demangle([str(k["symbol"]) for k in kernels])
    return [KernelResources(kernel=names[str(k["symbol"])], **k) for k in kernels]  # type: ignore[arg-type]


def _read_used_line(line: str, into: dict[str, object]) -> None:
    if m := _BARRIERS.search(line):
        into["barriers"] = int(m.group(1))
    if m := _SMEM.search(line):
        into["shared_bytes"] = int(m.group(1))
    into["constant_bytes"] = sum(int(size) for size, _bank in _CMEM.findall(line))


def parse_diagnostics(text: str, repo_root: Path | None = None) -> list[Diagnostic]:
    """Errors and warnings with file:line, from nvcc, the host compiler, NVRTC or ptxas."""
    out: list[Diagnostic] = []
    for raw in text.splitlines():
        line = raw.strip()
        m = _DIAG_PAREN.match(line) or _DIAG_COLON.match(line)
        if m:
            sev = "warning" if m.group("sev") == "warning" else "error"
            out.append(Diagnostic(_repo_relative(m.group("file"), repo_root), int(m.group("line")), sev, m.group("msg")))
        elif m := _PTXAS_ERR.match(line):
            out.append(Diagnostic(None, None, "error", "ptxas: " + m.group("msg")))
    return out


def _repo_relative(file: str, repo_root: Path | None) -> str:
    if repo_root is None:
        return file
    path = Path(file)
    if not path.is_absolute():
        return file
    try:
        return path.resolve().relative_to(repo_root.resolve()).as_posix()
    except ValueError:
        return file


def demangle(symbols: Sequence[str]) -> dict[str, str]:
    """Readable names: ``cu++filt`` when it is installed, else the base name read from the mangling."""
    tool = shutil.which("cu++filt")
    mangled = [s for s in symbols if s.startswith("_Z")]
    names = {s: s for s in symbols}
    if tool and mangled:
        res = proc.run([tool, *mangled], timeout=30)
        lines = res.stdout.splitlines()
        if res.ok and len(lines) == len(mangled):
            names.update(zip(mangled, lines))
            return names
    names.update({s: base_name(s) for s in mangled})
    return names


def base_name(symbol: str) -> str:
    """The unqualified function name inside an Itanium-mangled symbol (``_Z5scaleILi2EEvPfi`` -> ``scale``)."""
    if not symbol.startswith("_Z"):
        return symbol
    i = 2
    nested = symbol.startswith("_ZN")
    if nested:
        i = 3
        while i < len(symbol) and symbol[i] in "rVKRO":
            i += 1
    last = symbol
    while i < len(symbol) and symbol[i].isdigit():
        j = i
        while j < len(symbol) and symbol[j].isdigit():
            j += 1
        length = int(symbol[i:j])
        last = symbol[j : j + length]
        i = j + length
        if not nested:
            break
        if i < len(symbol) and symbol[i] == "I":
            break
    return last
