"""What the judge asks of the reference worker on a case (named by its token): the upstream
gradients' recipe (``upstream``), the truth (``truth``: the float64 reference, the baseline and the
rounding envelope), torch in float32 (``baseline_fp32``), the head's rewritten reference
(``head_reference``) and the reference's operation count (``flops``); and the replies, each with the worker's isolation (see :func:`isolation`)."""
from __future__ import annotations

import dataclasses
from typing import ClassVar, Self, TypedDict

from ..wire import BadMessage
from .control import isolation
from .fields import MAX_NAME, Fields, mapping, name_map, shape, text
from .tensors import Ledger, ValueMeta, itemsizes, value_map, values_json

MAX_TOKEN = 1 << 16  # characters of a case's token


@dataclasses.dataclass(frozen=True)
class GradRecipe:
    """What makes one output's random upstream gradient: its shape and seed, and whether it is
    equal along the first dim (see ``worker.calling.upstream_recipe``)."""

    shape: tuple[int, ...]
    seed: int
    expanded: bool = False

    def to_json(self) -> dict[str, object]:
        return {"shape": list(self.shape), "seed": self.seed, "expanded": self.expanded}

    @classmethod
    def from_json(cls, d: object, what: str) -> GradRecipe:
        f = Fields(d, what)
        return cls(shape(f.get("shape"), f"{what} shape"), f.integer("seed"), f.flag("expanded", False))


def recipe_json(recipe: dict[str, GradRecipe] | None) -> dict[str, dict[str, object]] | None:
    return None if recipe is None else {k: r.to_json() for k, r in recipe.items()}


def read_recipe(value: object, what: str) -> dict[str, GradRecipe] | None:
    if value is None:
        return None
    return {text(k, what, MAX_NAME): GradRecipe.from_json(v, f"{what}[{k!r}]") for k, v in mapping(value, what).items()}


class CaseFields(TypedDict):
    """The fields every request about one case has (see :class:`CaseRequest`)."""

    case: str
    case_id: str
    salt: int


@dataclasses.dataclass(frozen=True)
class CaseRequest:
    """A request about one case: its token, its id (for messages) and the salt of its inputs."""

    case: str
    case_id: str
    salt: int = 0
    op: ClassVar[str] = ""

    def to_json(self) -> dict[str, object]:
        return {"op": self.op, "case": self.case, "case_id": self.case_id, "salt": self.salt}

    @classmethod
    def fields(cls, d: object) -> tuple[Fields, CaseFields]:
        f = Fields(d, cls.op)
        return f, {"case": f.text("case", MAX_TOKEN), "case_id": f.text("case_id", MAX_NAME),
                   "salt": f.integer("salt", 0, 1 << 32)}

    @classmethod
    def from_json(cls, d: object, blobs: Ledger) -> Self:
        return cls(**cls.fields(d)[1])


def dtype_map(value: object, what: str) -> dict[str, str]:
    out = name_map(value, what)
    for k, v in out.items():
        if v not in itemsizes():
            raise BadMessage(f"{what}[{k!r}]: {v!r} is not one of torch's dtypes")
    return out


@dataclasses.dataclass(frozen=True)
class Upstream(CaseRequest):
    op: ClassVar[str] = "upstream"


@dataclasses.dataclass(frozen=True)
class HeadReference(CaseRequest):
    op: ClassVar[str] = "head_reference"


@dataclasses.dataclass(frozen=True)
class Flops(CaseRequest):
    """How many floating-point operations the spec's reference does on the case (its matrix products,
    convolutions and attention, as torch's FLOP counter counts them): the compute side of the speed
    check's hardware floor."""

    op: ClassVar[str] = "flops"


@dataclasses.dataclass(frozen=True)
class Truth(CaseRequest):
    """``like``: the dtype of each output, as the candidate returned it (the baseline's dtypes)."""

    like: dict[str, str] = dataclasses.field(default_factory=dict)
    op: ClassVar[str] = "truth"

    def to_json(self) -> dict[str, object]:
        return {**super().to_json(), "like": self.like}

    @classmethod
    def from_json(cls, d: object, blobs: Ledger) -> Self:
        f, known = cls.fields(d)
        return cls(**known, like=dtype_map(f.get("like", {}), f"{cls.op} like"))


@dataclasses.dataclass(frozen=True)
class BaselineFp32(Truth):
    op: ClassVar[str] = "baseline_fp32"


# --- replies ------------------------------------------------------------------------

@dataclasses.dataclass(frozen=True)
class UpstreamReply:
    """The recipe of the case's upstream gradients (None: not a backward spec)."""

    upstream: dict[str, GradRecipe] | None
    isolated: bool | None = None
    why: str | None = None
    tree: str | None = None  # whose tree the reference's repository code came from: "head" or "base"
    op: ClassVar[str] = "upstream"

    def to_json(self) -> dict[str, object]:
        return {"op": self.op, "upstream": recipe_json(self.upstream), "isolated": self.isolated, "why": self.why,
                "tree": self.tree}

    @classmethod
    def from_json(cls, d: object, blobs: Ledger) -> UpstreamReply:
        f = Fields(d, "upstream reply")
        return cls(read_recipe(f.get("upstream"), "upstream reply upstream"), *isolation(f))


@dataclasses.dataclass(frozen=True)
class TruthReply:
    reference: dict[str, ValueMeta]
    baseline: dict[str, ValueMeta]
    conditioning: dict[str, ValueMeta]
    isolated: bool | None = None
    why: str | None = None
    tree: str | None = None  # whose tree the reference's repository code came from: "head" or "base"
    op: ClassVar[str] = "truth"

    def to_json(self) -> dict[str, object]:
        return {"op": self.op, "reference": values_json(self.reference), "baseline": values_json(self.baseline),
                "conditioning": values_json(self.conditioning), "isolated": self.isolated, "why": self.why,
                "tree": self.tree}

    @classmethod
    def from_json(cls, d: object, blobs: Ledger) -> TruthReply:
        f = Fields(d, "truth reply")
        ref, base, cond = (value_map(f.get(k), blobs, f"truth reply {k}") for k in ("reference", "baseline",
                                                                                     "conditioning"))
        return cls(ref, base, cond, *isolation(f))


@dataclasses.dataclass(frozen=True)
class BaselineFp32Reply:
    """torch in float32; ``storage``: the rounding envelope of a kernel that stores its
    intermediates in the data's dtype (None where the data is not coarser than the arithmetic)."""

    baseline: dict[str, ValueMeta]
    storage: dict[str, ValueMeta] | None = None
    isolated: bool | None = None
    why: str | None = None
    tree: str | None = None  # whose tree the reference's repository code came from: "head" or "base"
    op: ClassVar[str] = "baseline_fp32"

    def to_json(self) -> dict[str, object]:
        return {"op": self.op, "baseline": values_json(self.baseline),
                "storage": values_json(self.storage) if self.storage is not None else None,
                "isolated": self.isolated, "why": self.why,
                "tree": self.tree}

    @classmethod
    def from_json(cls, d: object, blobs: Ledger) -> BaselineFp32Reply:
        f = Fields(d, "baseline_fp32 reply")
        storage = f.get("storage")
        return cls(value_map(f.get("baseline"), blobs, "baseline_fp32 reply baseline"),
                   None if storage is None else value_map(storage, blobs, "baseline_fp32 reply storage"),
                   *isolation(f))


@dataclasses.dataclass(frozen=True)
class HeadReferenceReply:
    """The head's spec's reference (float64), or why there is none to compare: ``skipped`` (the
    two specs cannot be compared) or ``raised`` (the head's reference raised this)."""

    reference: dict[str, ValueMeta] | None = None
    skipped: str | None = None
    raised: str | None = None
    isolated: bool | None = None
    why: str | None = None
    tree: str | None = None  # whose tree the reference's repository code came from: "head" or "base"
    op: ClassVar[str] = "head_reference"

    def to_json(self) -> dict[str, object]:
        return {"op": self.op, "reference": values_json(self.reference) if self.reference is not None else None,
                "skipped": self.skipped, "raised": self.raised, "isolated": self.isolated, "why": self.why,
                "tree": self.tree}

    @classmethod
    def from_json(cls, d: object, blobs: Ledger) -> HeadReferenceReply:
        f = Fields(d, "head_reference reply")
        ref = f.get("reference")
        out = cls(None if ref is None else value_map(ref, blobs, "head_reference reply reference"),
                  f.opt_text("skipped"), f.opt_text("raised"), *isolation(f))
        if (out.reference is None) == (out.skipped is None and out.raised is None):
            raise BadMessage("head_reference reply: expected the reference, or why there is none")
        return out



MAX_FLOPS = 1 << 80  # more than any case of any spec does


@dataclasses.dataclass(frozen=True)
class FlopsReply:
    """The reference's operation count on the case, or why there is none (``skipped``)."""

    flops: int | None = None
    skipped: str | None = None
    isolated: bool | None = None
    why: str | None = None
    tree: str | None = None
    op: ClassVar[str] = "flops"

    def to_json(self) -> dict[str, object]:
        return {"op": self.op, "flops": self.flops, "skipped": self.skipped, "isolated": self.isolated,
                "why": self.why, "tree": self.tree}

    @classmethod
    def from_json(cls, d: object, blobs: Ledger) -> FlopsReply:
        f = Fields(d, "flops reply")
        flops = f.get("flops")
        out = cls(None if flops is None else f.integer("flops", 0, MAX_FLOPS), f.opt_text("skipped"), *isolation(f))
        if (out.flops is None) == (out.skipped is None):
            raise BadMessage("flops reply: expected the count, or why there is none")
        return out
