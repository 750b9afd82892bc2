"""One call of the code under review: the judge's ``call`` request (the case's inputs, in their
guarded buffers, and how to run it) and the candidate worker's reply (what came out, as data)."""
from __future__ import annotations

import dataclasses
from typing import ClassVar

from ..wire import BadMessage
from .fields import MAX_NAME, Fields, integer, items, mapping, name_map, shape, span, strides, text
from .reference import GradRecipe, recipe_json, read_recipe
from .tensors import Ledger, TensorMeta, ValueMeta, tensor_map, tensors_json, value_map, values_json


@dataclasses.dataclass(frozen=True)
class Geometry:
    """How a view sits in its guarded buffer (see :func:`gpu_gate.protocol.guard.geometry`)."""

    shape: tuple[int, ...]
    stride: tuple[int, ...]
    offset: int
    dtype: str
    nbytes: int

    def to_json(self) -> dict[str, object]:
        return {"shape": list(self.shape), "stride": list(self.stride), "offset": self.offset, "dtype": self.dtype,
                "nbytes": self.nbytes}

    @classmethod
    def from_json(cls, d: object, what: str) -> Geometry:
        f = Fields(d, what)
        return cls(shape(f.get("shape"), f"{what} shape"), strides(f.get("stride"), f"{what} stride"),
                   f.integer("offset", 0), f.text("dtype", 64), f.integer("nbytes", 0))


@dataclasses.dataclass(frozen=True)
class GuardedInput:
    """An input as the judge built it: its whole guarded buffer (uint8) and the view's geometry."""

    buffer: TensorMeta
    geometry: Geometry

    def to_json(self) -> dict[str, object]:
        return {"buffer": self.buffer.to_json(), "geometry": self.geometry.to_json()}

    @classmethod
    def from_json(cls, d: object, blobs: Ledger, what: str) -> GuardedInput:
        f = Fields(d, what)
        return cls(TensorMeta.from_json(f.get("buffer"), blobs, f"{what} buffer"),
                   Geometry.from_json(f.get("geometry"), f"{what} geometry"))


def _configs(value: object, what: str) -> dict[str, dict[str, str]]:
    """Autotuned kernels' configs: kernel -> {key: config}, as ``worker.autotune`` names them."""
    return {text(k, what, MAX_NAME): {text(key, f"{what}[{k!r}]", MAX_NAME): text(c, f"{what}[{k!r}][{key!r}]", MAX_NAME)
                                      for key, c in mapping(v, f"{what}[{k!r}]").items()}
            for k, v in mapping(value, what).items()}


@dataclasses.dataclass(frozen=True)
class Call:
    """Run the candidate on the case. ``inputs``: new guarded inputs (else the last call's);
    ``refill``: new values in the same buffers; ``upstream``: the upstream gradients' recipe, or
    ``again`` (the last call's); the flags choose the probes (see ``worker.candidate``)."""

    dims: dict[str, int]
    grad_layout: str = "contiguous"
    hold: bool = False
    early: bool = False
    load: bool = False
    compare_held: bool = False
    relocate: bool = False
    plain: dict[str, str] | None = None
    hold_sms: bool = False
    exact: bool = False
    produce: str | None = None
    producer: tuple[str, ...] = ()
    hold_caller: bool = False
    inputs_back: bool = True
    upstream: dict[str, GradRecipe] | None = None
    upstream_again: bool = False
    inputs: dict[str, GuardedInput] | None = None
    refill: dict[str, TensorMeta] | None = None
    # the configs to run autotuned kernels on for some keys, where their lists have them (see
    # worker.autotune): the base's code, on the configs the head's ran
    autotune: dict[str, dict[str, str]] = dataclasses.field(default_factory=dict)
    op: ClassVar[str] = "call"
    FLAGS: ClassVar[tuple[str, ...]] = ("hold", "early", "load", "compare_held", "relocate", "hold_sms", "exact",
                                        "hold_caller", "inputs_back")

    def to_json(self) -> dict[str, object]:
        d: dict[str, object] = {"op": self.op, "dims": self.dims, "grad_layout": self.grad_layout, "plain": self.plain,
                             "produce": self.produce, "producer": list(self.producer),
                             **{k: getattr(self, k) for k in self.FLAGS}}
        d["upstream"] = ({"again": True} if self.upstream_again else
                         {"recipe": recipe_json(self.upstream)} if self.upstream is not None else None)
        if self.inputs is not None:
            d["inputs"] = {k: g.to_json() for k, g in self.inputs.items()}
        if self.refill is not None:
            d["refill"] = tensors_json(self.refill)
        if self.autotune:
            d["autotune"] = self.autotune
        return d

    @classmethod
    def from_json(cls, d: object, blobs: Ledger) -> Call:
        f = Fields(d, "call")
        dims = {text(k, "call dims", MAX_NAME): integer(v, f"call dims[{k!r}]", 0)
                for k, v in f.mapping("dims").items()}
        up = f.get("upstream")
        again = isinstance(up, dict) and up.get("again") is True
        recipe = None
        if up is not None and not again:
            recipe = read_recipe(mapping(up, "call upstream").get("recipe"), "call upstream recipe")
            if recipe is None:
                raise BadMessage("call upstream: an upstream gradient comes as its recipe")
        inputs = f.get("inputs")
        refill = f.get("refill")
        return cls(
            dims=dims, grad_layout=f.text("grad_layout", 64), plain=None if f.get("plain") is None else
            name_map(f.get("plain"), "call plain"), produce=f.opt_text("produce", 64), producer=f.names("producer"),
            upstream=recipe, upstream_again=again,
            inputs=None if inputs is None else {text(k, "call inputs", MAX_NAME): GuardedInput.from_json(
                v, blobs, f"call inputs[{k!r}]") for k, v in mapping(inputs, "call inputs").items()},
            refill=None if refill is None else tensor_map(refill, blobs, "call refill"),
            autotune=_configs(f.get("autotune", {}), "call autotune"),
            **{k: f.flag(k, k == "inputs_back") for k in cls.FLAGS})


@dataclasses.dataclass(frozen=True)
class Watch:
    """The guard bytes of an output buffer the candidate allocated with ``gg.empty``."""

    shape: tuple[int, ...]
    head: TensorMeta
    tail: TensorMeta

    def to_json(self) -> dict[str, object]:
        return {"shape": list(self.shape), "head": self.head.to_json(), "tail": self.tail.to_json()}

    @classmethod
    def from_json(cls, d: object, blobs: Ledger, what: str) -> Watch:
        f = Fields(d, what)
        return cls(shape(f.get("shape"), f"{what} shape"), TensorMeta.from_json(f.get("head"), blobs, f"{what} head"),
                   TensorMeta.from_json(f.get("tail"), blobs, f"{what} tail"))


@dataclasses.dataclass(frozen=True)
class CallFailed:
    """The call did not return outputs: ``refused`` (it raised), ``unsupported`` (this device or
    the interpreter cannot run it), ``oom`` or ``fatal`` (its CUDA context is gone)."""

    status: str
    message: str = ""
    trace: str | None = None
    op: ClassVar[str] = "call"
    STATUSES: ClassVar[tuple[str, ...]] = ("refused", "unsupported", "oom", "fatal")

    def to_json(self) -> dict[str, object]:
        return {"op": self.op, "status": self.status, "message": self.message, "trace": self.trace}

    @classmethod
    def from_json(cls, d: object, blobs: Ledger) -> CallFailed:
        f = Fields(d, "call reply")
        status = f.text("status", 16)
        if status not in cls.STATUSES:
            raise BadMessage(f"call reply: unknown status {status!r}")
        return cls(status, f.text("message"), f.opt_text("trace"))


def _spans(f: Fields, key: str) -> dict[str, tuple[int, int]]:
    return {text(k, f.name(key), MAX_NAME): span(v, f"{f.name(key)}[{k!r}]") for k, v in f.mapping(key).items()}


@dataclasses.dataclass(frozen=True)
class CallDone:
    """What came out of a call, as data: the outputs (``held``: the same as the held ones, not sent
    again), the copies taken at return that differ from them (``early``), the input buffers the
    call wrote (None: put back, not sent), the guard bytes of the buffers it allocated, where
    everything lived, and what the worker did around the call. Timing figures for reports only."""

    outputs: dict[str, ValueMeta] = dataclasses.field(default_factory=dict)
    early: dict[str, TensorMeta] = dataclasses.field(default_factory=dict)
    same_as_held: tuple[str, ...] = ()
    where: dict[str, tuple[int, int]] = dataclasses.field(default_factory=dict)
    held_where: dict[str, tuple[int, int]] = dataclasses.field(default_factory=dict)
    input_spans: dict[str, tuple[int, int]] = dataclasses.field(default_factory=dict)
    inputs_changed: dict[str, TensorMeta | None] = dataclasses.field(default_factory=dict)
    watch: tuple[Watch, ...] = ()
    side_streams: int = 0
    run_s: float = 0.0
    compile_s: float = 0.0
    held_sms: bool | str | None = None
    produced: bool | str | None = None
    held_caller: bool | str | None = None
    configs: dict[str, dict[str, str]] = dataclasses.field(default_factory=dict)  # autotuned kernels' (see Call)
    op: ClassVar[str] = "call"
    status: ClassVar[str] = "ok"

    def to_json(self) -> dict[str, object]:
        return {"op": self.op, "status": self.status, "outputs": values_json(self.outputs),
                "early": tensors_json(self.early), "same_as_held": list(self.same_as_held),
                "where": {k: list(v) for k, v in self.where.items()},
                "held_where": {k: list(v) for k, v in self.held_where.items()},
                "input_spans": {k: list(v) for k, v in self.input_spans.items()},
                "inputs_changed": {k: m.to_json() if m is not None else None for k, m in self.inputs_changed.items()},
                "watch": [w.to_json() for w in self.watch], "side_streams": self.side_streams, "run_s": self.run_s,
                "compile_s": self.compile_s, "held_sms": self.held_sms, "produced": self.produced,
                "held_caller": self.held_caller, "configs": self.configs}

    @classmethod
    def from_json(cls, d: object, blobs: Ledger) -> CallDone:
        f = Fields(d, "call reply")
        changed = {text(k, "call reply inputs_changed", MAX_NAME):
                   None if v is None else TensorMeta.from_json(v, blobs, f"call reply inputs_changed[{k!r}]")
                   for k, v in f.mapping("inputs_changed").items()}
        watch = tuple(Watch.from_json(w, blobs, f"call reply watch[{i}]")
                      for i, w in enumerate(items(f.get("watch", []), "call reply watch")))
        return cls(value_map(f.get("outputs", {}), blobs, "call reply outputs"),
                   tensor_map(f.get("early", {}), blobs, "call reply early"), f.names("same_as_held"),
                   _spans(f, "where"), _spans(f, "held_where"), _spans(f, "input_spans"), changed, watch,
                   f.integer("side_streams", 0, 1 << 20), f.number("run_s", 0.0), f.number("compile_s", 0.0),
                   f.either("held_sms"), f.either("produced"), f.either("held_caller"),
                   _configs(f.get("configs", {}), "call reply configs"))


def read_call_reply(d: object, blobs: Ledger) -> CallDone | CallFailed:
    status = Fields(d, "call reply").get("status")
    return CallDone.from_json(d, blobs) if status == "ok" else CallFailed.from_json(d, blobs)
