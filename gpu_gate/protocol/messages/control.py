"""The requests every worker answers, and their replies: import the job's spec (``load``), describe
it (``describe``), say what the candidate launched (``finish``), compile ahead (``ahead``,
``ahead_done``), what crossed (``stats``), drop held outputs (``release``), goodbye (``bye``); and
the reply any request may get instead of its own: an error."""
from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Any, ClassVar, Self, cast

from ..jobs import Job
from ..wire import BadMessage, Json
from .fields import MAX_NAME, Fields, json_mapping, mapping, name_map, names, optional, text
from .tensors import Ledger

if TYPE_CHECKING:
    from . import SpecImportFacts

MAX_TOKENS = 1 << 16  # case tokens one ``ahead`` request may name (the worker takes the first 4096)
MAX_UNCOMPILED = 50_000  # files a worker may list as imported without bytecode (the store's own limit)
MAX_PATH = 4096


# --- requests ------------------------------------------------------------------------

@dataclasses.dataclass(frozen=True)
class Load:
    """Import the job's spec (again, for a job whose spec changed)."""

    job: Job
    op: ClassVar[str] = "load"

    def to_json(self) -> dict[str, object]:
        return {"op": self.op, "job": self.job.to_json()}

    @classmethod
    def from_json(cls, d: object, blobs: Ledger) -> Load:
        try:
            return cls(Job.from_json(mapping(Fields(d, "load").get("job"), "load job")))
        except (TypeError, ValueError, KeyError) as exc:
            raise BadMessage(f"load: not a job ({exc})") from exc


@dataclasses.dataclass(frozen=True)
class Bare:
    """A request with no fields of its own."""

    op: ClassVar[str]  # each kind's own

    def to_json(self) -> dict[str, object]:
        return {"op": self.op}

    @classmethod
    def from_json(cls, d: object, blobs: Ledger) -> Self:
        Fields(d, cls.op)
        return cls()


@dataclasses.dataclass(frozen=True)
class Describe(Bare):
    op: ClassVar[str] = "describe"


@dataclasses.dataclass(frozen=True)
class AheadDone(Bare):
    op: ClassVar[str] = "ahead_done"


@dataclasses.dataclass(frozen=True)
class Stats(Bare):
    op: ClassVar[str] = "stats"


@dataclasses.dataclass(frozen=True)
class Release(Bare):
    op: ClassVar[str] = "release"


@dataclasses.dataclass(frozen=True)
class Bye(Bare):
    op: ClassVar[str] = "bye"


@dataclasses.dataclass(frozen=True)
class Finish:
    """What the candidate launched; ``compile``: the compile check's settings, where the launched
    specializations are to be compiled too."""

    # the judge's own settings (its policy's), which the worker reads as it always has: key by key
    compile: dict[str, Any] | None = None
    op: ClassVar[str] = "finish"

    def to_json(self) -> dict[str, object]:
        return {"op": self.op, "compile": self.compile}

    @classmethod
    def from_json(cls, d: object, blobs: Ledger) -> Finish:
        f = Fields(d, "finish")
        return cls(optional(f.get("compile"), json_mapping, "finish compile"))


@dataclasses.dataclass(frozen=True)
class Ahead:
    """Compile the kernels of these cases (tokens) in a process beside the worker."""

    cases: tuple[str, ...]
    op: ClassVar[str] = "ahead"

    def to_json(self) -> dict[str, object]:
        return {"op": self.op, "cases": list(self.cases)}

    @classmethod
    def from_json(cls, d: object, blobs: Ledger) -> Ahead:
        return cls(Fields(d, "ahead").names("cases", 1 << 16, MAX_TOKENS))


# --- replies ------------------------------------------------------------------------

@dataclasses.dataclass(frozen=True)
class ErrorReply:
    """The worker could not do what was asked: ``error`` is ``fatal`` (its CUDA context is gone),
    ``reference`` (the spec's reference raised), ``oom`` (the reference ran out of GPU memory on the
    case: a fact about its size on a shared GPU, not the spec), ``protocol`` (it was asked something
    it does not answer) or ``worker`` (anything else). A reference worker says too whether it still
    runs apart from the code under review, and from whose tree."""

    op: str
    error: str
    message: str = ""
    isolated: bool | None = None
    why: str | None = None
    tree: str | None = None  # whose tree the reference's repository code came from: "head" or "base"

    ERRORS = ("fatal", "reference", "oom", "protocol", "worker")

    def to_json(self) -> dict[str, object]:
        d: dict[str, object] = {"op": self.op, "error": self.error, "message": self.message}
        if self.isolated is not None:
            d.update(isolated=self.isolated, why=self.why, tree=self.tree)
        return d

    @classmethod
    def from_json(cls, d: object, blobs: Ledger) -> ErrorReply:
        f = Fields(d, "error reply")
        error = f.text("error", 40)
        if error not in cls.ERRORS:
            raise BadMessage(f"error reply: unknown error {error!r}")
        return cls(f.text("op", 40), error, f.text("message"), *isolation(f))


@dataclasses.dataclass(frozen=True)
class LoadReply:
    """The spec imported: where, whether the code it imported uses Triton (the candidate's answer),
    the CUDA settings its import set too late, and how long each step took (timing only)."""

    device: str
    torch_import_s: float = 0.0
    alive_s: float = 0.0
    spec_import_s: float = 0.0
    spec_module_s: float = 0.0  # of spec_import_s: the spec's module and what it imports, alone
    context_s: float = 0.0  # creating the CUDA context, on its own thread beside the import (0: not yet done)
    seed_s: float = 0.0
    seed_wait_s: float = 0.0
    seeded: float = 0.0
    late_cuda_settings: tuple[str, ...] = ()
    uses_triton: bool | None = None
    interpreter: tuple[str, ...] = ()  # the interpreter's adaptations switched on (see worker.interpreter)
    op: ClassVar[str] = "load"
    TIMES: ClassVar[tuple[str, ...]] = ("alive_s", "torch_import_s", "spec_import_s", "spec_module_s", "context_s",
                                        "seed_s", "seed_wait_s", "seeded")

    def to_json(self) -> dict[str, object]:
        return {"op": self.op, **dataclasses.asdict(self), "late_cuda_settings": list(self.late_cuda_settings),
                "interpreter": list(self.interpreter)}

    @classmethod
    def from_json(cls, d: object, blobs: Ledger) -> LoadReply:
        f = Fields(d, "load reply")
        times = {k: f.number(k, 0.0) for k in cls.TIMES}
        return cls(f.text("device", 16), late_cuda_settings=f.names("late_cuda_settings"),
                   uses_triton=f.flag("uses_triton") if f.get("uses_triton") is not None else None,
                   interpreter=f.names("interpreter"), **times)


@dataclasses.dataclass(frozen=True)
class SpecImportReply:
    """The spec did not import in the worker: the facts (see :class:`SpecImportFacts`)."""

    facts: SpecImportFacts
    op: ClassVar[str] = "load"

    def to_json(self) -> dict[str, object]:
        return {"op": self.op, "error": "spec-import", "facts": self.facts.to_json()}

    @classmethod
    def from_json(cls, d: object, blobs: Ledger) -> SpecImportReply:
        from . import SpecImportFacts

        return cls(SpecImportFacts.from_json(Fields(d, "spec-import reply").get("facts")))


@dataclasses.dataclass(frozen=True)
class SpecDescription:
    """What the judge knows of a spec: everything but its functions (the judge imports no spec).
    ``dims`` and ``inputs``: each one's fields by name, with its ``kind`` (``Dim``, ``Tensor``,
    ``Index``)."""

    name: str
    dims: dict[str, dict[str, Json]]
    inputs: dict[str, dict[str, Json]]
    dim_args: tuple[str, ...]
    grads: tuple[str, ...]
    covers: tuple[str, ...]
    deterministic: bool
    tolerance: dict[str, Any]  # checked as JSON only: keyword arguments of spec.Tolerance, which checks them
    devices: tuple[str, ...]
    checks: tuple[str, ...] | None
    module: str
    file: str
    line: int
    accumulate: str | None
    params: tuple[str, ...]
    mutates: dict[str, str]
    producer: tuple[str, ...]

    KINDS: ClassVar[tuple[str, ...]] = ("Dim", "Tensor", "Index")

    def to_json(self) -> dict[str, object]:
        d = dataclasses.asdict(self)
        return {k: list(v) if isinstance(v, tuple) else v for k, v in d.items()}

    @classmethod
    def from_json(cls, d: object) -> SpecDescription:
        f = Fields(d, "spec description")
        checks = f.get("checks")
        return cls(
            name=f.text("name", MAX_NAME), dims=cls._parts(f, "dims"), inputs=cls._parts(f, "inputs"),
            dim_args=f.names("dim_args"), grads=f.names("grads"), covers=f.names("covers", MAX_PATH),
            deterministic=f.flag("deterministic"),
            tolerance=mapping(f.json("tolerance"), "spec tolerance"),
            devices=f.names("devices"), checks=None if checks is None else f.names("checks"),
            module=f.text("module", MAX_PATH), file=f.text("file", MAX_PATH), line=f.integer("line", 0),
            accumulate=f.opt_text("accumulate", 64), params=f.names("params"),
            mutates=name_map(f.get("mutates", {}), "spec mutates"),
            producer=f.names("producer"))

    @classmethod
    def _parts(cls, f: Fields, key: str) -> dict[str, dict[str, Json]]:
        out = {}
        for name, part in f.mapping(key).items():
            where = f"spec {key}[{name!r}]"
            fields = json_mapping(part, where)
            if fields.get("kind") not in cls.KINDS:
                raise BadMessage(f"{where}: unknown kind {fields.get('kind')!r}")
            out[text(name, where, MAX_NAME)] = fields
        return out


@dataclasses.dataclass(frozen=True)
class DescribeReply:
    spec: SpecDescription
    isolated: bool | None = None
    why: str | None = None
    tree: str | None = None  # whose tree the reference's repository code came from: "head" or "base"
    op: ClassVar[str] = "describe"

    def to_json(self) -> dict[str, object]:
        return {"op": self.op, "spec": self.spec.to_json(), "isolated": self.isolated, "why": self.why,
                "tree": self.tree}

    @classmethod
    def from_json(cls, d: object, blobs: Ledger) -> DescribeReply:
        f = Fields(d, "describe reply")
        return cls(SpecDescription.from_json(f.get("spec")), *isolation(f))


TREES = ("head", "base")


def isolation(f: Fields) -> tuple[bool | None, str | None, str | None]:
    """What a reference worker says of itself with every answer: whether it runs apart from the
    code under review, why not, and whose tree the repository code it imported came from (the
    base's on a pull request: see gpu_gate.worker.reference)."""
    tree = f.opt_text("tree", 8)
    if tree is not None and tree not in TREES:
        raise BadMessage(f"{f.what}: unknown tree {tree!r}")
    return (f.flag("isolated") if f.get("isolated") is not None else None), f.opt_text("why"), tree


@dataclasses.dataclass(frozen=True)
class FinishReply:
    """What the candidate launched: its coverage (``launches``) and Triton specializations, their
    compiled facts where asked (``compile``, read field by field by the compile check's judge), the
    autotuned kernels run untimed, the modules imported without bytecode, and timing figures."""

    launches: dict[str, Json] | None = None
    specializations: tuple[dict[str, Json], ...] = ()
    compile: dict[str, Json] | None = None
    compile_taken: int | None = None
    untimed_autotune: tuple[str, ...] = ()
    uncompiled: tuple[str, ...] | None = None
    ahead: dict[str, float | int | bool] | None = None
    finish_times: dict[str, float | int | bool] = dataclasses.field(default_factory=dict)
    # what the launches needed of the interpreter's adaptations: each one's kernels (see worker.interpreter)
    interpreter_adapted: dict[str, tuple[str, ...]] | None = None
    op: ClassVar[str] = "finish"

    def to_json(self) -> dict[str, object]:
        d = dataclasses.asdict(self)
        d = {k: list(v) if isinstance(v, tuple) else v for k, v in d.items()}
        return {"op": self.op, **d}

    @classmethod
    def from_json(cls, d: object, blobs: Ledger) -> FinishReply:
        f = Fields(d, "finish reply")
        specs = f.json("specializations") or []
        if not isinstance(specs, list) or not all(isinstance(s, dict) for s in specs):
            raise BadMessage("finish reply specializations: expected a list of mappings")
        launches, compiled = f.json("launches"), f.json("compile")
        for key, value in (("launches", launches), ("compile", compiled)):
            if value is not None and not isinstance(value, dict):
                raise BadMessage(f"finish reply {key}: expected a mapping")
        taken = f.get("compile_taken")
        # each checked above: a mapping or None, a list of mappings
        return cls(cast("dict[str, Json] | None", launches), cast("tuple[dict[str, Json], ...]", tuple(specs)),
                   cast("dict[str, Json] | None", compiled), None if taken is None else f.integer("compile_taken", 0),
                   f.names("untimed_autotune"),
                   None if f.get("uncompiled") is None else f.names("uncompiled", MAX_PATH, MAX_UNCOMPILED),
                   None if f.get("ahead") is None else f.figures("ahead"), f.figures("finish_times"),
                   None if f.get("interpreter_adapted") is None else
                   {text(k, "finish reply interpreter_adapted", MAX_NAME): names(v, f"finish reply interpreter_adapted[{k!r}]")
                    for k, v in f.mapping("interpreter_adapted").items()})


@dataclasses.dataclass(frozen=True)
class AheadReply:
    """The sibling started (``ok``), or why not (``skipped``)."""

    ok: bool = False
    skipped: str | None = None
    op: ClassVar[str] = "ahead"

    def to_json(self) -> dict[str, object]:
        return {"op": self.op, "ok": self.ok, "skipped": self.skipped}

    @classmethod
    def from_json(cls, d: object, blobs: Ledger) -> AheadReply:
        f = Fields(d, "ahead reply")
        return cls(f.flag("ok", False), f.opt_text("skipped"))


@dataclasses.dataclass(frozen=True)
class AheadDoneReply:
    """What the compiling sibling did (timing only)."""

    ahead: dict[str, float | int | bool]
    op: ClassVar[str] = "ahead_done"

    def to_json(self) -> dict[str, object]:
        return {"op": self.op, "ahead": self.ahead}

    @classmethod
    def from_json(cls, d: object, blobs: Ledger) -> AheadDoneReply:
        return cls(Fields(d, "ahead_done reply").figures("ahead"))


@dataclasses.dataclass(frozen=True)
class StatsReply:
    """What the worker moved through its channel, its age and how long its CUDA context took to
    make (timing only)."""

    wire: dict[str, float | int | bool]
    alive_s: float | None = None
    context_s: float | None = None
    op: ClassVar[str] = "stats"

    def to_json(self) -> dict[str, object]:
        return {"op": self.op, "wire": self.wire, "alive_s": self.alive_s, "context_s": self.context_s}

    @classmethod
    def from_json(cls, d: object, blobs: Ledger) -> StatsReply:
        f = Fields(d, "stats reply")
        return cls(f.figures("wire"), *(None if f.get(k) is None else f.number(k) for k in ("alive_s", "context_s")))


@dataclasses.dataclass(frozen=True)
class ReleaseReply:
    op: ClassVar[str] = "release"

    def to_json(self) -> dict[str, object]:
        return {"op": self.op, "ok": True}

    @classmethod
    def from_json(cls, d: object, blobs: Ledger) -> ReleaseReply:
        Fields(d, "release reply")
        return cls()
