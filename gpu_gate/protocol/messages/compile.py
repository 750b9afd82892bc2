"""The compile check's request and reply.

The judge asks its compile worker (``compiler``; ``base`` on the base's tree) for one kernel file
at a time (:class:`CompileRequest`); the worker imports the file's Triton module or runs nvcc, and
answers with :class:`CompileFacts` (in a :class:`CompileReply`): what the compilers said, nothing
decided. The PTX of the architecture the judge reads travels as a blob, each one of at most
``MAX_PTX`` bytes, named by its index as a tensor's bytes are (:class:`~.tensors.Ledger`): the
reply is read, every field and every blob's claimed size, before any blob's bytes are, and its
texts are taken from the bytes that arrived (:func:`ptx_text`).
"""
from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import ClassVar, Union

from ..wire import BadMessage, Blob, Json
from .fields import Fields, integer, items, json_mapping, mapping, number, text
from .tensors import Ledger

MAX_PATH = 4096  # characters of a path, or a name the compilers print
MAX_PTX = 256 << 20  # bytes of one PTX text
MAX_TIMEOUT = 86400.0
SCALAR = (str, int, float, bool, type(None))
Scalar = Union[str, int, float, bool, None]  # a constexpr's value as it crosses


def name(value: object, what: str) -> str:
    """A text that may not be empty (a file, an architecture, a kernel)."""
    out = text(value, what, MAX_PATH)
    if not out:
        raise BadMessage(f"{what}: empty")
    return out


def names(value: object, what: str) -> tuple[str, ...]:
    return tuple(name(v, f"{what}[{i}]") for i, v in enumerate(items(value, what)))


def count(value: object, what: str) -> int:
    """A non-negative integer (a line, a byte count), never a bool."""
    return integer(value, what, 0)


def opt_count(value: object, what: str) -> int | None:
    return None if value is None else count(value, what)


def ptx_blob(value: object, blobs: Ledger, what: str) -> int | None:
    """The index of the blob that holds a PTX text (None: no PTX)."""
    return None if value is None else blobs.take_text(value, MAX_PTX, what)


def put_text(value: str | None, blobs: list[Blob]) -> int | None:
    """A text appended to the blobs a worker sends; its index (None for no text)."""
    if value is None:
        return None
    blobs.append(value.encode())
    return len(blobs) - 1


def ptx_text(index: int | None, blobs: Sequence[bytearray]) -> str | None:
    """The PTX text of blob ``index`` (read against the reply's ledger: it exists and is bounded)."""
    if index is None:
        return None
    return bytes(blobs[index]).decode("utf-8", errors="replace")


def scalars(value: object, what: str) -> dict[str, Scalar]:
    """Constexpr values as the worker used them: names to JSON scalars (text for anything else)."""
    out: dict[str, Scalar] = {}
    for k, v in mapping(value, what).items():
        if not isinstance(v, SCALAR) or (isinstance(v, str) and len(v) > MAX_PATH):
            raise BadMessage(f"{what}: the value of {str(k)[:40]!r} is not a number, a bool or a short text")
        out[name(k, what)] = v
    return out


# --- the request ---------------------------------------------------------------------------------

@dataclasses.dataclass(frozen=True)
class CompileRequest:
    """One kernel file to compile: for Triton, the kernels the judge read in it (by name) and the
    policy's values for them; for CUDA, nvcc's include directories and flags."""

    file: str
    archs: tuple[str, ...]
    read_arch: str  # the architecture whose PTX is sent back (the judge reads it)
    kernels: tuple[str, ...] = ()
    triton: dict[str, Json] = dataclasses.field(default_factory=dict)  # kernel -> {"signature", "constexprs"}
    include_dirs: tuple[str, ...] = ()
    nvcc_flags: tuple[str, ...] = ()
    timeout_s: float = 300.0
    python_path: tuple[str, ...] = ("",)
    op: ClassVar[str] = "compile"

    def to_json(self) -> dict[str, object]:
        return {"op": self.op, **dataclasses.asdict(self)}

    @classmethod
    def from_json(cls, d: object, blobs: Ledger) -> CompileRequest:
        f = Fields(d, "compile request")
        timeout = number(f.get("timeout_s", 300.0), "compile request timeout_s")
        if not 0 < timeout <= MAX_TIMEOUT:
            raise BadMessage("compile request: a timeout that is not a number of seconds")
        triton = json_mapping(f.get("triton", {}), "compile request triton")
        return cls(name(f.get("file"), "compile request file"), names(f.get("archs"), "compile request archs"),
                   name(f.get("read_arch"), "compile request read_arch"),
                   names(f.get("kernels", []), "compile request kernels"), triton,
                   f.names("include_dirs", MAX_PATH), f.names("nvcc_flags", MAX_PATH), timeout,
                   f.names("python_path", MAX_PATH) if "python_path" in f.d else ("",))


# --- the reply -----------------------------------------------------------------------------------

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

    def to_json(self) -> dict[str, object]:
        return dataclasses.asdict(self)

    @classmethod
    def from_json(cls, d: object) -> ResourceFacts:
        f = Fields(d, "resource row")
        registers, spill_store, spill_load, local, shared, constant, barriers = (
            count(f.get(k, 0), f.name(k)) for k in RESOURCE_COUNTS)
        return cls(name(f.get("kernel"), f.name("kernel")), name(f.get("symbol"), f.name("symbol")),
                   name(f.get("arch"), f.name("arch")), registers, spill_store, spill_load, local, shared, constant,
                   barriers)


@dataclasses.dataclass(frozen=True)
class DiagnosticFacts:
    """One diagnostic of nvcc's: where (as nvcc named it, relative to the repository where it
    could be), how severe, what."""

    file: str | None
    line: int | None
    severity: str
    message: str

    SEVERITIES: ClassVar[tuple[str, ...]] = ("error", "warning")

    def to_json(self) -> dict[str, object]:
        return dataclasses.asdict(self)

    @classmethod
    def from_json(cls, d: object) -> DiagnosticFacts:
        f = Fields(d, "diagnostic")
        severity = f.text("severity", 20)
        if severity not in cls.SEVERITIES:
            raise BadMessage(f"diagnostic: unknown severity {severity!r}")
        return cls(f.opt_text("file", MAX_PATH), opt_count(f.get("line"), f.name("line")), severity,
                   f.text("message"))


def _resources(value: object, what: str) -> tuple[ResourceFacts, ...]:
    return tuple(ResourceFacts.from_json(x) for x in items(value, what))


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

    def to_json(self) -> dict[str, object]:
        return {"arch": self.arch, "ok": self.ok, "not_found": self.not_found, "timed_out": self.timed_out,
                "how": self.how, "tail": self.tail, "diagnostics": [x.to_json() for x in self.diagnostics],
                "resources": [r.to_json() for r in self.resources]}

    @classmethod
    def from_json(cls, d: object) -> NvccFacts:
        f = Fields(d, "nvcc build")
        return cls(name(f.get("arch"), f.name("arch")), f.flag("ok"), f.flag("not_found"), f.flag("timed_out"),
                   f.text("how"), f.text("tail"),
                   tuple(DiagnosticFacts.from_json(x) for x in items(f.get("diagnostics"), f.name("diagnostics"))),
                   _resources(f.get("resources"), f.name("resources")))


@dataclasses.dataclass(frozen=True)
class TritonBuildFacts:
    """One Triton kernel compiled for one architecture: built (its resources, and the blob of its
    PTX where the architecture is the one read), or the compiler's error: its text, the error
    itself, and the line of the offending node counted from the kernel's ``def`` (1 is the ``def``)."""

    arch: str
    ok: bool
    error: str = ""
    message: str = ""
    node_line: int | None = None
    resources: tuple[ResourceFacts, ...] = ()
    ptx: int | None = None  # the blob of its PTX (see ptx_text)

    def to_json(self) -> dict[str, object]:
        return {"arch": self.arch, "ok": self.ok, "error": self.error, "message": self.message,
                "node_line": self.node_line, "resources": [r.to_json() for r in self.resources], "ptx": self.ptx}

    @classmethod
    def from_json(cls, d: object, blobs: Ledger) -> TritonBuildFacts:
        f = Fields(d, "Triton build")
        return cls(name(f.get("arch"), f.name("arch")), f.flag("ok"), f.text("error"), f.text("message"),
                   opt_count(f.get("node_line"), f.name("node_line")),
                   _resources(f.get("resources"), f.name("resources")),
                   ptx_blob(f.get("ptx"), blobs, "Triton build PTX"))


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
    constexprs: dict[str, Scalar] = dataclasses.field(default_factory=dict)
    guessed: bool = False
    missing: tuple[str, ...] = ()
    builds: tuple[TritonBuildFacts, ...] = ()

    def to_json(self) -> dict[str, object]:
        return {"name": self.name, "found": self.found, "source": self.source, "signature": dict(self.signature),
                "constexprs": dict(self.constexprs), "guessed": self.guessed, "missing": list(self.missing),
                "builds": [b.to_json() for b in self.builds]}

    @classmethod
    def from_json(cls, d: object, blobs: Ledger) -> TritonKernelFacts:
        f = Fields(d, "Triton kernel")
        signature = {name(k, "signature"): name(v, "signature type")
                     for k, v in mapping(f.get("signature"), f.name("signature")).items()}
        return cls(name(f.get("name"), f.name("name")), f.flag("found"), f.text("source", MAX_PATH), signature,
                   scalars(f.get("constexprs"), "constexprs"), f.flag("guessed"),
                   names(f.get("missing"), "missing constexprs"),
                   tuple(TritonBuildFacts.from_json(x, blobs) for x in items(f.get("builds"), f.name("builds"))))


@dataclasses.dataclass(frozen=True)
class CompileFacts:
    """What the worker says of one file: the file, the repository root as the worker saw it (the
    compilers name files under it), and what happened. ``tool_missing``: why no compiler could run
    (nvcc not found, triton not installed); ``import_error``: the Triton module did not import
    (``Type: message``); ``nvcc``: one build per architecture, and ``ptx`` the blob of the PTX of
    the architecture read (None where it did not build); ``kernels``: the Triton kernels asked for."""

    file: str
    root: str
    language: str
    tool_missing: str = ""
    import_error: str = ""
    nvcc: tuple[NvccFacts, ...] = ()
    ptx: int | None = None  # the blob of its PTX (see ptx_text)
    kernels: tuple[TritonKernelFacts, ...] = ()

    LANGUAGES: ClassVar[tuple[str, ...]] = ("cuda", "triton")

    def to_json(self) -> dict[str, object]:
        return {"file": self.file, "root": self.root, "language": self.language, "tool_missing": self.tool_missing,
                "import_error": self.import_error, "nvcc": [n.to_json() for n in self.nvcc], "ptx": self.ptx,
                "kernels": [k.to_json() for k in self.kernels]}

    @classmethod
    def from_json(cls, d: object, blobs: Ledger) -> CompileFacts:
        f = Fields(d, "compile facts")
        language = f.text("language", 20)
        if language not in cls.LANGUAGES:
            raise BadMessage(f"compile facts: unknown language {language!r}")
        return cls(name(f.get("file"), f.name("file")), name(f.get("root"), f.name("root")), language,
                   f.text("tool_missing"), f.text("import_error"),
                   tuple(NvccFacts.from_json(x) for x in items(f.get("nvcc"), "nvcc builds")),
                   ptx_blob(f.get("ptx"), blobs, "CUDA PTX"),
                   tuple(TritonKernelFacts.from_json(x, blobs) for x in items(f.get("kernels"), "Triton kernels")))


@dataclasses.dataclass(frozen=True)
class CompileReply:
    """The answer to a :class:`CompileRequest`: the facts of the file asked for."""

    facts: CompileFacts
    op: ClassVar[str] = "compile"

    def to_json(self) -> dict[str, object]:
        return {"op": self.op, "facts": self.facts.to_json()}

    @classmethod
    def from_json(cls, d: object, blobs: Ledger) -> CompileReply:
        return cls(CompileFacts.from_json(Fields(d, "compile reply").get("facts"), blobs))

