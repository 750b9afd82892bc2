"""The judge's handle on the reference worker: the spec as it describes it, and on each case the
upstream gradients' recipe, the truth (the float64 reference, the baseline, the rounding envelope),
torch in float32 and the head's rewritten reference. Each reply is bounded by the case's size
(:func:`gpu_gate.judge.limits.reply_budget`) and read into its record before its tensors are rebuilt."""
from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from typing import Any, NoReturn

from ..protocol import wire
from ..protocol.cases import Case
from ..protocol.messages import (BaselineFp32, BaselineFp32Reply, Describe, DescribeReply, Flops, FlopsReply, GradRecipe,
                                 HeadReference,
                                 HeadReferenceReply, Reply, Request, SpecDescription, Stats, Truth, TruthReply,
                                 Upstream, UpstreamReply, tensors)
from ..spec import Dim, Index, Spec, Tensor, Tolerance
from .channel import Channel, WorkerLost, WorkerTimeout
from .limits import reply_budget
from .replies import SpecBroken, check, expect, reading, stats_of

Recipe = dict[str, GradRecipe]  # the upstream gradients' recipe, as the reference worker sent it


def _not_here(*args: object, **kwargs: object) -> NoReturn:
    raise RuntimeError("the judge never runs the spec's functions: the workers do")


def spec_from_description(d: SpecDescription) -> Spec:
    """The spec the judge works with: the reference worker's description, functions left out. A
    description no spec can be made from is a :class:`~gpu_gate.protocol.wire.BadMessage`."""
    def build(fields: dict[str, Any], where: str) -> Any:
        obj = dict(fields)
        kind = obj.pop("kind")
        cls = {"Dim": Dim, "Tensor": Tensor, "Index": Index}[kind]
        unknown = set(obj) - {f.name for f in dataclasses.fields(cls)}
        if unknown:
            raise wire.BadMessage(f"spec {where}: unknown fields {sorted(unknown)} of a {kind}")
        if kind == "Dim" and obj.get("values") is not None:
            obj["values"] = tuple(obj["values"])
        if kind == "Index":
            obj["shape"] = tuple(obj["shape"])
            obj["dists"] = tuple(obj["dists"]) if obj.get("dists") is not None else None
            obj["layouts"] = tuple(obj["layouts"]) if obj.get("layouts") is not None else None
        return cls(**obj)

    try:
        return Spec(name=d.name, fn=_not_here, dims={k: build(v, f"dims[{k!r}]") for k, v in d.dims.items()},
                    inputs={k: build(v, f"inputs[{k!r}]") for k, v in d.inputs.items()}, reference=_not_here,
                    params={k: None for k in d.params}, dim_args=d.dim_args, grads=d.grads, covers=d.covers,
                    deterministic=d.deterministic, tolerance=Tolerance(**d.tolerance), devices=d.devices,
                    checks=d.checks, module=d.module, file=d.file, line=d.line, accumulate=d.accumulate,
                    mutates=dict(d.mutates), producer=d.producer)
    except (TypeError, ValueError, KeyError) as exc:
        raise wire.BadMessage(f"a spec description no spec can be made from ({type(exc).__name__}: {exc})") from exc


class Reference:
    def __init__(self, channel: Channel, device: str, deadline: float) -> None:
        self.channel, self.device, self.deadline = channel, device, deadline
        self.spec: Spec | None = None  # once described: what a case's replies may carry is counted from it
        self.isolated = True
        self.why: str | None = None
        self.tree = "head"  # whose tree the reference's repository code came from: "base" on a pull request
        self.wait_s = 0.0  # time the judge waited for the reference (beyond what ran beside the candidate)

    def _ask(self, request: Request, budget: int = 0) -> Reply:
        self._send(request, budget)
        return self._receive()[0]

    def _send(self, request: Request, budget: int = 0) -> None:
        try:
            self.channel.ask(request, (), budget)
        except WorkerLost as exc:
            raise SpecBroken(f"the spec's reference crashed its worker ({exc})") from exc

    def _budget(self, case: Case) -> int:
        assert self.spec is not None, "the reference is asked about a case once the spec is known"
        return reply_budget(self.spec, case)

    def _receive(self, timed: bool = True) -> tuple[Reply, list[bytearray]]:
        """The reference worker's next answer. ``timed``: the judge waits for it here (an answer
        read on a thread of its own, beside the judge's work, is timed where it is waited for)."""
        import time

        start = time.monotonic()
        try:
            reply, blobs = self.channel.answer(self.deadline)
        except WorkerTimeout as exc:
            raise SpecBroken(f"the spec's reference did not finish within the job's time budget ({exc})") from exc
        except WorkerLost as exc:
            raise SpecBroken(f"the spec's reference crashed its worker ({exc})") from exc
        finally:
            if timed:
                self.wait_s += time.monotonic() - start
        if getattr(reply, "isolated", None) is False:
            self.isolated, self.why = False, getattr(reply, "why", None)
            self.tree = "base" if getattr(reply, "tree", None) == "base" else "head"
        check(reply, "reference")
        return reply, blobs

    def describe(self) -> Spec:
        """The spec, as the reference worker describes it (see :func:`spec_from_description`)."""
        reply = expect(self._ask(Describe()), DescribeReply, self.channel)
        with reading(self.channel, "describe"):
            self.spec = spec_from_description(reply.spec)
        return self.spec

    def upstream(self, case: Case, salt: int = 0) -> Recipe | None:
        """The recipe of the case's upstream gradients (backward specs; else None): each output's
        shape and seed. The workers make the values from it (see worker.calling.upstream_recipe);
        the judge never needs them."""
        reply = self._ask(Upstream(case.token(), case.id, salt))
        return expect(reply, UpstreamReply, self.channel).upstream

    def truth(self, case: Case, like: Mapping[str, object], salt: int = 0
              ) -> tuple[dict[str, object], dict[str, object], dict[str, object]]:
        return self.truth_later(case, like, salt)()

    def truth_later(self, case: Case, like: Mapping[str, object], salt: int = 0) -> TruthPending:
        """Ask for the float64 reference, the baseline and the rounding envelope now, for outputs of
        the dtypes of ``like``'s; the object returned waits for them."""
        return self.truth_for(case, output_dtypes(like), salt)

    def truth_for(self, case: Case, dtypes: dict[str, str], salt: int = 0) -> TruthPending:
        """The same, for outputs of the dtypes named. The answer is read and put on the device by a
        thread of its own as it arrives: the judge and the candidate's worker go on meanwhile (a
        case's truth is several times the size of the candidate's outputs). Nothing else may be
        asked of the reference worker until it has been waited for."""
        self._send(Truth(case.token(), case.id, salt, dict(dtypes)), self._budget(case))

        def read() -> tuple[dict[str, object], dict[str, object], dict[str, object]]:
            reply, blobs = self._receive(timed=False)
            got = expect(reply, TruthReply, self.channel)
            with reading(self.channel, "truth"):
                return (dict(tensors.decode_dict(got.reference, blobs, self.device)),
                        dict(tensors.decode_dict(got.baseline, blobs, self.device)),
                        dict(tensors.decode_dict(got.conditioning, blobs, self.device)))

        return TruthPending(read, dict(dtypes), self)

    def head_reference(self, case: Case) -> dict[str, object] | str:
        """The head's spec's reference on ``case`` (float64), or why there is none to compare."""
        self._send(HeadReference(case.token(), case.id, 0), self._budget(case))
        reply, blobs = self._receive()
        got = expect(reply, HeadReferenceReply, self.channel)
        if got.skipped is not None:
            return f"not compared: {got.skipped}"
        if got.raised is not None:
            return f"raised {got.raised}"
        assert got.reference is not None
        with reading(self.channel, "head_reference"):
            return dict(tensors.decode_dict(got.reference, blobs, self.device))

    def flops(self, case: Case) -> int | str:
        """The reference's floating-point operations on ``case`` (see worker.reference), or why none."""
        got = expect(self._ask(Flops(case.token(), case.id, 0)), FlopsReply, self.channel)
        return got.flops if got.flops is not None else str(got.skipped)

    def stats(self) -> dict[str, object]:
        """What the worker says it moved through the channel (timing only, never a verdict)."""
        return stats_of(self._ask(Stats()), self.channel)

    def baseline_fp32(self, case: Case, like: Mapping[str, object], salt: int = 0
                      ) -> tuple[dict[str, object], dict[str, object] | None]:
        """torch in float32, rounded to each output's dtype; and, for data coarser than the kernel's
        arithmetic, the rounding envelope of a kernel that stores its intermediates in that dtype."""
        self._send(BaselineFp32(case.token(), case.id, salt, output_dtypes(like)), self._budget(case))
        reply, blobs = self._receive()
        got = expect(reply, BaselineFp32Reply, self.channel)
        with reading(self.channel, "baseline_fp32"):
            return (dict(tensors.decode_dict(got.baseline, blobs, self.device)),
                    dict(tensors.decode_dict(got.storage, blobs, self.device)) if got.storage is not None else None)


class TruthPending:
    """A truth asked for, read by a thread of its own; calling it waits for it (and raises what
    reading it raised). ``dtypes``: the output dtypes it was asked for."""

    def __init__(self, read: Callable[[], tuple[dict[str, object], dict[str, object], dict[str, object]]],
                 dtypes: dict[str, str], reference: Reference) -> None:
        import threading

        self.dtypes, self.reference, self.taken = dtypes, reference, False
        self._result: tuple[dict[str, object], dict[str, object], dict[str, object]] | None = None
        self._error: BaseException | None = None

        def run() -> None:
            try:
                self._result = read()
            except BaseException as exc:  # noqa: BLE001 - raised where it is waited for
                self._error = exc

        self._thread = threading.Thread(target=run, name="truth", daemon=True)
        self._thread.start()

    def __call__(self) -> tuple[dict[str, object], dict[str, object], dict[str, object]]:
        import time

        start = time.monotonic()
        self._thread.join()
        self.reference.wait_s += time.monotonic() - start
        self.taken = True
        if self._error is not None:
            raise self._error
        assert self._result is not None
        return self._result


def output_dtypes(like: Mapping[str, object]) -> dict[str, str]:
    """The dtype of each tensor among ``like``'s values, by name (``"float32"``)."""
    import torch

    return {k: str(v.dtype).removeprefix("torch.") for k, v in like.items() if isinstance(v, torch.Tensor)}
