"""The messages between the judge and its workers, as typed records.

A worker's answer is data the judge validates on receipt: a field of the wrong type or out of its
range is a :class:`~gpu_gate.protocol.wire.BadMessage`, which the judge reports as a protocol
finding that fails the job closed, never as an internal error.
"""
from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

from .wire import BadMessage

MAX_TEXT = 64 << 10  # characters of any one text a worker sends (a message, a traceback)


def text(value: Any, what: str, limit: int = MAX_TEXT) -> str:
    if not isinstance(value, str):
        raise BadMessage(f"{what}: expected text, got {type(value).__name__}")
    return value[:limit]


@dataclasses.dataclass(frozen=True)
class SpecImportFacts:
    """Why the spec did not import in a worker: the kind (``spec-import-error``, ``spec-not-found``),
    the spec's file and line, the message and the traceback."""

    kind: str
    file: str
    line: int | None
    message: str
    traceback: str = ""

    KINDS = ("spec-import-error", "spec-not-found")

    def to_json(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_json(cls, d: Any) -> SpecImportFacts:
        if not isinstance(d, dict):
            raise BadMessage("spec-import: expected a mapping of facts")
        kind = text(d.get("kind"), "spec-import kind", 40)
        if kind not in cls.KINDS:
            raise BadMessage(f"spec-import: unknown kind {kind!r}")
        line = d.get("line")
        if line is not None and (not isinstance(line, int) or isinstance(line, bool) or line < 0):
            raise BadMessage("spec-import: a line that is not a line number")
        return cls(kind, text(d.get("file"), "spec-import file", 4096), line, text(d.get("message"), "spec-import message"),
                   text(d.get("traceback", ""), "spec-import traceback"))


# --- the compile check ---------------------------------------------------------------------------
# The judge asks its compile worker (``compiler``; ``base`` on the base's tree) for one kernel file
# at a time (:class:`CompileRequest`); the worker imports the file's Triton module or runs nvcc, and
# answers with :class:`CompileFacts`: what the compilers said, nothing decided. The PTX of the
# architecture the judge reads travels as a blob. Every field is checked here on receipt.

MAX_ITEMS = 4096  # entries of any one list in a compile answer (kernels, builds, rows, diagnostics)
MAX_NAME = 4096  # characters of a name or a path
MAX_PTX = 256 << 20  # bytes of one PTX text


def _mapping(value: Any, what: str) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise BadMessage(f"{what}: expected a mapping, got {type(value).__name__}")
    return value


def _items(value: Any, what: str, limit: int = MAX_ITEMS) -> list[Any]:
    if not isinstance(value, list):
        raise BadMessage(f"{what}: expected a list, got {type(value).__name__}")
    if len(value) > limit:
        raise BadMessage(f"{what}: {len(value)} entries, more than {limit}")
    return value


def _flag(value: Any, what: str) -> bool:
    if not isinstance(value, bool):
        raise BadMessage(f"{what}: expected true or false, got {type(value).__name__}")
    return value


def _count(value: Any, what: str, *, optional: bool = False) -> int | None:
    """A non-negative integer (a line, a byte count), never a bool."""
    if value is None and optional:
        return None
    if not isinstance(value, int) or isinstance(value, bool) or value < 0:
        raise BadMessage(f"{what}: expected a non-negative integer, got {value!r:.40}")
    return value


def _name(value: Any, what: str) -> str:
    name = text(value, what, MAX_NAME)
    if not name:
        raise BadMessage(f"{what}: empty")
    return name


def _names(value: Any, what: str) -> tuple[str, ...]:
    return tuple(_name(v, what) for v in _items(value, what))


def _blob_text(index: Any, blobs: Sequence[Any], what: str) -> str | None:
    """The text of blob ``index`` (None: no blob); an index out of range, or a blob larger than
    any PTX, is not an answer."""
    if index is None:
        return None
    i = _count(index, f"{what} blob")
    assert i is not None
    if i >= len(blobs):
        raise BadMessage(f"{what}: blob {i} of {len(blobs)}")
    raw = blobs[i]
    if len(raw) > MAX_PTX:
        raise BadMessage(f"{what}: {len(raw)} bytes, more than {MAX_PTX}")
    return bytes(raw).decode("utf-8", errors="replace")


def _put_text(value: str | None, blobs: list[Any]) -> int | None:
    if value is None:
        return None
    blobs.append(value.encode())
    return len(blobs) - 1


SCALAR = (str, int, float, bool, type(None))


def _scalars(value: Any, what: str) -> dict[str, Any]:
    """Constexpr values as the worker used them: names to JSON scalars (text for anything else)."""
    out = {}
    for k, v in _items(list(_mapping(value, what).items()), what):
        if not isinstance(v, SCALAR) or (isinstance(v, str) and len(v) > MAX_NAME):
            raise BadMessage(f"{what}: the value of {str(k)[:40]!r} is not a number, a bool or a short text")
        out[_name(k, what)] = v
    return out


@dataclasses.dataclass(frozen=True)
class CompileRequest:
    """One kernel file to compile: for Triton, the kernels the judge read in it (by name) and the
    policy's values for them; for CUDA, nvcc's include directories and flags."""

    file: str
    archs: tuple[str, ...]
    read_arch: str  # the architecture whose PTX is sent back (the judge reads it)
    kernels: tuple[str, ...] = ()
    triton: dict[str, Any] = dataclasses.field(default_factory=dict)  # kernel -> {"signature", "constexprs"}
    include_dirs: tuple[str, ...] = ()
    nvcc_flags: tuple[str, ...] = ()
    timeout_s: float = 300.0
    python_path: tuple[str, ...] = ("",)

    OP = "compile"

    def to_json(self) -> dict[str, Any]:
        return {"op": self.OP, **dataclasses.asdict(self)}

    @classmethod
    def from_json(cls, d: Any) -> CompileRequest:
        d = _mapping(d, "compile request")
        timeout = d.get("timeout_s", 300.0)
        if not isinstance(timeout, (int, float)) or isinstance(timeout, bool) or not 0 < timeout <= 86400:
            raise BadMessage("compile request: a timeout that is not a number of seconds")
        return cls(_name(d.get("file"), "compile request file"), _names(d.get("archs"), "compile request archs"),
                   _name(d.get("read_arch"), "compile request read_arch"), _names(d.get("kernels", []), "kernels"),
                   dict(_mapping(d.get("triton", {}), "compile request triton")),
                   tuple(text(v, "include dir", MAX_NAME) for v in _items(d.get("include_dirs", []), "include dirs")),
                   tuple(text(v, "nvcc flag", MAX_NAME) for v in _items(d.get("nvcc_flags", []), "nvcc flags")),
                   float(timeout),
                   tuple(text(v, "python path", MAX_NAME) for v in _items(d.get("python_path", [""]), "python path")))


RESOURCE_COUNTS = ("registers", "spill_store", "spill_load", "local_bytes", "shared_bytes", "constant_bytes",
                   "barriers")


@dataclasses.dataclass(frozen=True)
class ResourceFacts:
    """What ptxas printed for one kernel on one architecture."""

    kernel: str
    symbol: str
    arch: str
    registers: int = 0
    spill_store: int = 0
    spill_load: int = 0
    local_bytes: int = 0
    shared_bytes: int = 0
    constant_bytes: int = 0
    barriers: int = 0

    def to_json(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_json(cls, d: Any) -> ResourceFacts:
        d = _mapping(d, "resource row")
        counts = {k: _count(d.get(k, 0), f"resource row {k}") for k in RESOURCE_COUNTS}
        return cls(_name(d.get("kernel"), "resource row kernel"), _name(d.get("symbol"), "resource row symbol"),
                   _name(d.get("arch"), "resource row arch"), **counts)  # type: ignore[arg-type]


@dataclasses.dataclass(frozen=True)
class DiagnosticFacts:
    """One diagnostic of nvcc's: where (as nvcc named it, relative to the repository where it
    could be), how severe, what."""

    file: str | None
    line: int | None
    severity: str
    message: str

    SEVERITIES = ("error", "warning")

    def to_json(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_json(cls, d: Any) -> DiagnosticFacts:
        d = _mapping(d, "diagnostic")
        severity = text(d.get("severity"), "diagnostic severity", 20)
        if severity not in cls.SEVERITIES:
            raise BadMessage(f"diagnostic: unknown severity {severity!r}")
        file = d.get("file")
        return cls(None if file is None else text(file, "diagnostic file", MAX_NAME),
                   _count(d.get("line"), "diagnostic line", optional=True), severity,
                   text(d.get("message"), "diagnostic message"))


@dataclasses.dataclass(frozen=True)
class NvccFacts:
    """One nvcc build of a CUDA file for one architecture: whether it built, how it ended (``how``,
    as the process helper describes it), the tail of its output, its diagnostics and, where it
    built, ptxas's resources."""

    arch: str
    ok: bool
    not_found: bool = False
    timed_out: bool = False
    how: str = ""
    tail: str = ""
    diagnostics: tuple[DiagnosticFacts, ...] = ()
    resources: tuple[ResourceFacts, ...] = ()

    def to_json(self) -> dict[str, Any]:
        return {"arch": self.arch, "ok": self.ok, "not_found": self.not_found, "timed_out": self.timed_out,
                "how": self.how, "tail": self.tail, "diagnostics": [x.to_json() for x in self.diagnostics],
                "resources": [r.to_json() for r in self.resources]}

    @classmethod
    def from_json(cls, d: Any) -> NvccFacts:
        d = _mapping(d, "nvcc build")
        return cls(_name(d.get("arch"), "nvcc build arch"), _flag(d.get("ok"), "nvcc build ok"),
                   _flag(d.get("not_found"), "nvcc build not_found"), _flag(d.get("timed_out"), "nvcc timed_out"),
                   text(d.get("how"), "nvcc build how"), text(d.get("tail"), "nvcc build tail"),
                   tuple(DiagnosticFacts.from_json(x) for x in _items(d.get("diagnostics"), "nvcc diagnostics")),
                   tuple(ResourceFacts.from_json(x) for x in _items(d.get("resources"), "nvcc resources")))


@dataclasses.dataclass(frozen=True)
class TritonBuildFacts:
    """One Triton kernel compiled for one architecture: built (its resources, and its PTX where
    the architecture is the one read), or the compiler's error: its text, the error itself, and
    the line of the offending node counted from the kernel's ``def`` (1 is the ``def``)."""

    arch: str
    ok: bool
    error: str = ""
    message: str = ""
    node_line: int | None = None
    resources: tuple[ResourceFacts, ...] = ()
    ptx: str | None = None

    def to_json(self, blobs: list[Any]) -> dict[str, Any]:
        return {"arch": self.arch, "ok": self.ok, "error": self.error, "message": self.message,
                "node_line": self.node_line, "resources": [r.to_json() for r in self.resources],
                "ptx": _put_text(self.ptx, blobs)}

    @classmethod
    def from_json(cls, d: Any, blobs: Sequence[Any]) -> TritonBuildFacts:
        d = _mapping(d, "Triton build")
        return cls(_name(d.get("arch"), "Triton build arch"), _flag(d.get("ok"), "Triton build ok"),
                   text(d.get("error"), "Triton build error"), text(d.get("message"), "Triton build message"),
                   _count(d.get("node_line"), "Triton build node_line", optional=True),
                   tuple(ResourceFacts.from_json(x) for x in _items(d.get("resources"), "Triton build resources")),
                   _blob_text(d.get("ptx"), blobs, "Triton build PTX"))


@dataclasses.dataclass(frozen=True)
class TritonKernelFacts:
    """One Triton kernel the judge asked for: whether the module has it as a module-level
    ``@triton.jit`` function, the file its function was defined in (as the worker's process saw
    it), the signature and constexpr values it was compiled with (``guessed``: the signature was
    derived, not given by the policy; ``missing``: constexprs with no value known, then nothing
    was compiled), and its builds, one per architecture in the order asked."""

    name: str
    found: bool
    source: str = ""
    signature: dict[str, str] = dataclasses.field(default_factory=dict)
    constexprs: dict[str, Any] = dataclasses.field(default_factory=dict)
    guessed: bool = False
    missing: tuple[str, ...] = ()
    builds: tuple[TritonBuildFacts, ...] = ()

    def to_json(self, blobs: list[Any]) -> dict[str, Any]:
        return {"name": self.name, "found": self.found, "source": self.source, "signature": dict(self.signature),
                "constexprs": dict(self.constexprs), "guessed": self.guessed, "missing": list(self.missing),
                "builds": [b.to_json(blobs) for b in self.builds]}

    @classmethod
    def from_json(cls, d: Any, blobs: Sequence[Any]) -> TritonKernelFacts:
        d = _mapping(d, "Triton kernel")
        signature = {_name(k, "signature"): _name(v, "signature type")
                     for k, v in _items(list(_mapping(d.get("signature"), "signature").items()), "signature")}
        return cls(_name(d.get("name"), "Triton kernel name"), _flag(d.get("found"), "Triton kernel found"),
                   text(d.get("source"), "Triton kernel source", MAX_NAME), signature,
                   _scalars(d.get("constexprs"), "constexprs"), _flag(d.get("guessed"), "Triton kernel guessed"),
                   _names(d.get("missing"), "missing constexprs"),
                   tuple(TritonBuildFacts.from_json(x, blobs) for x in _items(d.get("builds"), "Triton builds")))


@dataclasses.dataclass(frozen=True)
class CompileFacts:
    """The answer to a :class:`CompileRequest`: the file, the repository root as the worker saw
    it (the compilers name files under it), and what happened. ``tool_missing``: why no compiler
    could run (nvcc not found, triton not installed); ``import_error``: the Triton module did not
    import (``Type: message``); ``nvcc``: one build per architecture, and ``ptx`` the PTX of the
    architecture read (None where it did not build); ``kernels``: the Triton kernels asked for."""

    file: str
    root: str
    language: str
    tool_missing: str = ""
    import_error: str = ""
    nvcc: tuple[NvccFacts, ...] = ()
    ptx: str | None = None
    kernels: tuple[TritonKernelFacts, ...] = ()

    LANGUAGES = ("cuda", "triton")

    def to_json(self, blobs: list[Any]) -> dict[str, Any]:
        return {"file": self.file, "root": self.root, "language": self.language, "tool_missing": self.tool_missing,
                "import_error": self.import_error, "nvcc": [n.to_json() for n in self.nvcc],
                "ptx": _put_text(self.ptx, blobs), "kernels": [k.to_json(blobs) for k in self.kernels]}

    @classmethod
    def from_json(cls, d: Any, blobs: Sequence[Any]) -> CompileFacts:
        d = _mapping(d, "compile facts")
        language = text(d.get("language"), "compile facts language", 20)
        if language not in cls.LANGUAGES:
            raise BadMessage(f"compile facts: unknown language {language!r}")
        return cls(_name(d.get("file"), "compile facts file"), _name(d.get("root"), "compile facts root"), language,
                   text(d.get("tool_missing"), "compile facts tool_missing"),
                   text(d.get("import_error"), "compile facts import_error"),
                   tuple(NvccFacts.from_json(x) for x in _items(d.get("nvcc"), "nvcc builds")),
                   _blob_text(d.get("ptx"), blobs, "CUDA PTX"),
                   tuple(TritonKernelFacts.from_json(x, blobs) for x in _items(d.get("kernels"), "Triton kernels")))
