"""The judge's handles on its two workers, and the spec as the judge knows it.

:class:`Candidate` sends a case's inputs to the candidate worker and reads back a :class:`CallReport`
of plain tensors and facts; :class:`Reference` asks the reference worker for the truth on a case.
Neither hands the judge an object a worker made: everything is rebuilt here from bytes and JSON.
"""
from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import Callable, Sequence
from typing import Any

from ..protocol import wire
from ..protocol.cases import Case
from ..protocol.guard import geometry
from ..protocol.inputs import Materialized
from ..findings import Finding
from ..protocol.jobs import Job
from ..protocol.messages import SpecImportFacts
from ..spec import Dim, Index, Spec, Tensor, Tolerance
from .channel import Channel, WorkerLost, WorkerTimeout


class ContextLost(Exception):
    """The candidate's CUDA context, or its worker, is gone: the rest of this job cannot run."""


class WorkerDied(ContextLost):
    """The candidate's worker process is gone (a crash, a signal, an exit): the executor knows how."""


class SpecBroken(Exception):
    """The spec itself (its reference) is wrong; not the kernel's fault."""


class ReferenceOutOfMemory(SpecBroken):
    """The reference ran out of GPU memory on a case: other work shares the GPU, or the case is too
    large for what is free. A check that can run the case smaller (the contention cases) does."""


class SpecDidNotImport(Exception):
    def __init__(self, finding: Finding) -> None:
        super().__init__(finding.message)
        self.finding = finding


def import_finding(job: Job, facts: SpecImportFacts) -> Finding:
    """The judge's finding for a spec that a worker could not import (what the worker said, as facts)."""
    return Finding(check=job.check, kind=facts.kind, spec=job.spec.id if job.spec else None, file=facts.file,
                   line=facts.line, message=facts.message,
                   details={**({"traceback": facts.traceback} if facts.traceback else {}),
                            **({"missing_module": facts.missing_module} if facts.missing_module else {})})


def _not_here(*args: Any, **kwargs: Any) -> Any:
    raise RuntimeError("the judge never runs the spec's functions: the workers do")


def spec_from_description(d: dict[str, Any]) -> Spec:
    """The spec the judge works with: the reference worker's description, functions left out."""
    def build(obj: dict[str, Any]) -> Any:
        kind = obj.pop("kind")
        cls = {"Dim": Dim, "Tensor": Tensor, "Index": Index}[kind]
        if kind == "Dim" and obj.get("values") is not None:
            obj["values"] = tuple(obj["values"])
        if kind == "Index":
            obj["shape"] = tuple(obj["shape"])
            obj["dists"] = tuple(obj["dists"]) if obj.get("dists") is not None else None
            obj["layouts"] = tuple(obj["layouts"]) if obj.get("layouts") is not None else None
        return cls(**obj)

    return Spec(name=str(d["name"]), fn=_not_here, dims={k: build(dict(v)) for k, v in d["dims"].items()},
                inputs={k: build(dict(v)) for k, v in d["inputs"].items()}, reference=_not_here,
                params={k: None for k in d.get("params") or []}, dim_args=tuple(d["dim_args"]),
                grads=tuple(d["grads"]), covers=tuple(d["covers"]), deterministic=bool(d["deterministic"]),
                tolerance=Tolerance(**d["tolerance"]), devices=tuple(d["devices"]),
                checks=tuple(d["checks"]) if d.get("checks") is not None else None, module=str(d["module"]),
                file=str(d["file"]), line=int(d["line"]), accumulate=d.get("accumulate"),
                mutates={str(k): str(v) for k, v in (d.get("mutates") or {}).items()},
                producer=tuple(str(n) for n in d.get("producer") or ()))


@dataclasses.dataclass
class CallReport:
    status: str  # ok, refused, unsupported, oom, fatal
    message: str = ""
    trace: str | None = None
    outputs: dict[str, Any] = dataclasses.field(default_factory=dict)  # plain tensors (or values)
    types: dict[str, str] = dataclasses.field(default_factory=dict)  # outputs that were not plain tensors
    early: dict[str, Any] = dataclasses.field(default_factory=dict)  # copies taken at return that differ
    same_as_held: frozenset[str] = frozenset()
    where: dict[str, list[int]] = dataclasses.field(default_factory=dict)  # output -> [data_ptr, storage_ptr]
    held_where: dict[str, list[int]] = dataclasses.field(default_factory=dict)
    input_spans: dict[str, list[int]] = dataclasses.field(default_factory=dict)
    inputs_changed: dict[str, Any] = dataclasses.field(default_factory=dict)  # name -> uint8 buffer after the call
    watch: list[tuple[list[int], bytes, bytes]] = dataclasses.field(default_factory=list)
    side_streams: int = 0
    held_sms: bool | str | None = None  # with hold_sms: True, or why the SMs could not be held
    produced: bool | str | None = None  # with produce: True, or why the producer could not run
    held_caller: bool | str | None = None  # with hold_caller: True, or why the caller's stream was not held


def _check(reply: dict[str, Any], what: str) -> None:
    err = reply.get("error")
    if err == "fatal":
        raise ContextLost(str(reply.get("message")))
    if err == "reference":
        raise SpecBroken(str(reply.get("message")))
    if err == "oom":
        raise ReferenceOutOfMemory(str(reply.get("message")))
    if err is not None:
        raise ContextLost(f"the {what} worker failed: {reply.get('message') or err}")


class Candidate:
    def __init__(self, channel: Channel, device: str, deadline: float) -> None:
        self.channel, self.device, self.deadline = channel, device, deadline
        self.case: str | None = None  # the case the last call ran, for messages
        self.busy_s = 0.0  # time the judge waited on this worker (its runs, compiles and the transfers)
        # as the worker reports them (for the timing report, never a verdict): time in the calls
        # themselves (compiles included), and in compiling Triton kernels
        self.run_s = 0.0
        self.compile_s = 0.0
        # the upstream gradient the worker holds from the last call it answered: (case, the dict sent)
        self._upstream_held: tuple[str, Any] | None = None
        self._upstream_pending: tuple[str, Any] | None = None
        # under compute-sanitizer: the worker hands the candidate tensors with no guard band, so
        # that the tool sees every access past a tensor's end (the guard band would absorb it)
        self.exact = False

    def call(self, *args: Any, **kwargs: Any) -> CallReport:
        import time

        start = time.monotonic()
        try:
            return self._call(*args, **kwargs)
        finally:
            self.busy_s += time.monotonic() - start

    def _ask(self, header: dict[str, Any], blobs: Sequence[Any] = ()) -> tuple[dict[str, Any], list[bytearray]]:
        self._send(header, blobs)
        return self._answer()

    def call_later(self, case: Case, upstream: dict[str, Any] | None, **kwargs: Any) -> Callable[[], CallReport]:
        """Send the call now; the function returned waits for its report. The worker runs while the
        judge does something else (the head's code, beside the base's)."""
        import time

        self._send_call(case, upstream, **kwargs)

        def wait() -> CallReport:
            start = time.monotonic()
            try:
                return self._read_call()
            finally:
                self.busy_s += time.monotonic() - start

        return wait

    def _call(self, case: Case, upstream: dict[str, Any] | None, **kwargs: Any) -> CallReport:
        self._send_call(case, upstream, **kwargs)
        return self._read_call()

    def _send_call(self, case: Case, upstream: dict[str, Any] | None, *, inputs: Materialized | None = None,
                   refill: Materialized | None = None, relocate: bool = False, hold: bool = False,
                   early: bool = False, load: bool = False, compare_held: bool = False,
                   plain: dict[str, str] | None = None, hold_sms: bool = False, produce: str | None = None,
                   producer: Sequence[str] = (), hold_caller: bool = False, inputs_back: bool = True) -> None:
        """``inputs_back=False``: the worker puts back the inputs the call wrote without sending
        them (``inputs_changed`` names them only)."""
        blobs: wire.Blobs = []
        # The same upstream gradient as the last call's, on the same case (the determinism check's
        # repeats): the worker runs with its copy of it, rather than receiving it again (on an H100, a
        # 90 MB gradient sent with each of 24 repeats was most of a contention case's 26 s).
        held = self._upstream_held
        again = upstream is not None and held is not None and held[0] == case.id and held[1] is upstream
        self.case = case.id
        self._upstream_pending = (case.id, upstream)
        header: dict[str, Any] = {"op": "call", "dims": case.dims, "grad_layout": case.grad_layout, "hold": hold,
                                  "early": early, "load": load, "compare_held": compare_held, "relocate": relocate,
                                  "plain": plain, "hold_sms": hold_sms, "exact": self.exact, "produce": produce,
                                  "producer": list(producer), "hold_caller": hold_caller, "inputs_back": inputs_back,
                                  "upstream": ({"again": True} if again else
                                               {"recipe": upstream} if upstream is not None else None)}
        if inputs is not None:
            header["inputs"] = {k: {"buffer": wire.encode_tensor(g.buffer, blobs), "geometry": geometry(g)}
                                for k, g in inputs.guarded.items()}
        if refill is not None:
            header["refill"] = {k: wire.encode_tensor(g.buffer, blobs) for k, g in refill.guarded.items()}
        self._send(header, blobs)

    def _send(self, header: dict[str, Any], blobs: Sequence[Any]) -> None:
        try:
            self.channel.ask(header, blobs)
        except WorkerLost as exc:
            raise WorkerDied(f"the candidate's worker died{self._at()}") from exc

    def _at(self) -> str:
        return f" on case {self.case}" if self.case else ""

    def _answer(self) -> tuple[dict[str, Any], list[bytearray]]:
        try:
            return self.channel.answer(self.deadline)
        except WorkerTimeout as exc:
            raise WorkerTimeout(f"the candidate did not return{self._at()} within the job's time budget: a hang (a "
                                f"deadlock in the kernel) or too slow") from exc
        except WorkerLost as exc:
            raise WorkerDied(f"the candidate's worker died{self._at()}") from exc

    def _read_call(self) -> CallReport:
        self._upstream_held = None  # until the worker answers: then it holds what was sent
        reply, got = self._answer()
        if reply.get("error"):
            _check(reply, "candidate")
        self._upstream_held = self._upstream_pending
        status = str(reply.get("status") or "refused")
        if status != "ok":
            if status == "fatal":
                raise ContextLost(str(reply.get("message")))
            return CallReport(status, str(reply.get("message") or ""), reply.get("trace"))
        with contextlib.suppress(TypeError, ValueError):
            self.run_s += max(0.0, float(reply.get("run_s") or 0.0))
            self.compile_s = max(self.compile_s, float(reply.get("compile_s") or 0.0))
        metas = reply.get("outputs") or {}
        outputs = {k: wire.decode_value(m, got, self.device) for k, m in metas.items() if not m.get("held")}
        types = {k: str(m.get("type")) for k, m in metas.items() if m.get("tensor") and not m.get("plain")}
        return CallReport(
            "ok", outputs=outputs, types=types,
            early={k: wire.decode_tensor(m, got, self.device) for k, m in (reply.get("early") or {}).items()},
            same_as_held=frozenset(reply.get("same_as_held") or ()), where=dict(reply.get("where") or {}),
            held_where=dict(reply.get("held_where") or {}), input_spans=dict(reply.get("input_spans") or {}),
            inputs_changed={k: wire.decode_tensor(m, got, self.device)
                            for k, m in (reply.get("inputs_changed") or {}).items() if not m.get("held")},
            watch=[(list(w["shape"]), bytes(got[int(w["head"]["blob"])]), bytes(got[int(w["tail"]["blob"])]))
                   for w in reply.get("watch") or []],
            side_streams=int(reply.get("side_streams") or 0),
            held_sms=reply.get("held_sms") if isinstance(reply.get("held_sms"), (bool, str)) else None,
            produced=reply.get("produced") if isinstance(reply.get("produced"), (bool, str)) else None,
            held_caller=reply.get("held_caller") if isinstance(reply.get("held_caller"), (bool, str)) else None)

    def release(self) -> None:
        """Let the worker drop the outputs it holds. Cleanup: a worker already lost (the error
        that lost it is the one being reported) is left alone."""
        if getattr(self.channel, "lost", None) is None:
            self._ask({"op": "release"})

    def finish(self, compile_settings: Any = None) -> dict[str, Any]:
        reply, _ = self._ask({"op": "finish", "compile": compile_settings})
        return reply

    def ahead_done(self) -> dict[str, Any]:
        """End the worker's compiling sibling; what it says it did (timing only, never a verdict)."""
        reply, _ = self._ask({"op": "ahead_done"})
        ahead = reply.get("ahead")
        return {str(k): v for k, v in ahead.items() if isinstance(v, (int, float, bool))} \
            if isinstance(ahead, dict) else {}

    def stats(self) -> dict[str, Any]:
        """What the worker says it moved through the channel (timing only, never a verdict)."""
        return _stats(self._ask({"op": "stats"})[0])

    def ahead(self, cases: Sequence[Case]) -> str | None:
        """Have the worker compile the kernels of ``cases`` ahead, beside it (see worker.ahead); why
        it does not, or None. It decides nothing: the worker's own calls run as they would."""
        reply, _ = self._ask({"op": "ahead", "cases": [c.token() for c in cases]})
        return None if reply.get("ok") else str(reply.get("skipped") or reply.get("message") or "no answer")


class Reference:
    def __init__(self, channel: Channel, device: str, deadline: float) -> None:
        self.channel, self.device, self.deadline = channel, device, deadline
        self.isolated = True
        self.why: str | None = None
        self.tree = "head"  # whose tree the reference's repository code came from: "base" on a pull request
        self.wait_s = 0.0  # time the judge waited for the reference (beyond what ran beside the candidate)

    def _ask(self, header: dict[str, Any]) -> tuple[dict[str, Any], list[bytearray]]:
        self._send(header)
        return self._receive()

    def _send(self, header: dict[str, Any]) -> None:
        try:
            self.channel.ask(header)
        except WorkerLost as exc:
            raise SpecBroken(f"the spec's reference crashed its worker ({exc})") from exc

    def _receive(self, timed: bool = True) -> tuple[dict[str, Any], list[bytearray]]:
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
        if "isolated" in reply and not reply.get("isolated"):
            self.isolated, self.why = False, reply.get("why")
            self.tree = "base" if reply.get("tree") == "base" else "head"
        _check(reply, "reference")
        return reply, blobs

    def upstream(self, case: Case, salt: int = 0) -> dict[str, Any] | None:
        """The recipe of the case's upstream gradients (backward specs; else None): each output's
        shape and seed. The workers make the values from it (see worker.calling.upstream_recipe);
        the judge never needs them."""
        reply, _ = self._ask({"op": "upstream", "case": case.token(), "case_id": case.id, "salt": salt})
        recipe = reply.get("upstream")
        if recipe is not None and not isinstance(recipe, dict):
            raise SpecBroken("the reference worker sent an upstream gradient that is not a recipe")
        return recipe

    def truth(self, case: Case, like: dict[str, Any], salt: int = 0
              ) -> tuple[dict[str, Any], dict[str, Any], dict[str, Any]]:
        return self.truth_later(case, like, salt)()

    def truth_later(self, case: Case, like: dict[str, Any], salt: int = 0) -> TruthPending:
        """Ask for the float64 reference, the baseline and the rounding envelope now, for outputs of
        the dtypes of ``like``'s; the object returned waits for them."""
        return self.truth_for(case, output_dtypes(like), salt)

    def truth_for(self, case: Case, dtypes: dict[str, str], salt: int = 0) -> TruthPending:
        """The same, for outputs of the dtypes named. The answer is read and put on the device by a
        thread of its own as it arrives: the judge and the candidate's worker go on meanwhile (a
        case's truth is several times the size of the candidate's outputs). Nothing else may be
        asked of the reference worker until it has been waited for."""
        self._send({"op": "truth", "case": case.token(), "case_id": case.id, "salt": salt, "like": dict(dtypes)})

        def read() -> tuple[dict[str, Any], dict[str, Any], dict[str, Any]]:
            reply, blobs = self._receive(timed=False)
            return (wire.decode_dict(reply["reference"], blobs, self.device),
                    wire.decode_dict(reply["baseline"], blobs, self.device),
                    wire.decode_dict(reply["conditioning"], blobs, self.device))

        return TruthPending(read, dict(dtypes), self)

    def head_reference(self, case: Case) -> dict[str, Any] | str:
        """The head's spec's reference on ``case`` (float64), or why there is none to compare."""
        reply, blobs = self._ask({"op": "head_reference", "case": case.token(), "case_id": case.id, "salt": 0})
        if reply.get("skipped"):
            return f"not compared: {reply['skipped']}"
        if reply.get("raised"):
            return f"raised {reply['raised']}"
        return wire.decode_dict(reply["reference"], blobs, self.device)

    def stats(self) -> dict[str, Any]:
        """What the worker says it moved through the channel (timing only, never a verdict)."""
        return _stats(self._ask({"op": "stats"})[0])

    def baseline_fp32(self, case: Case, like: dict[str, Any], salt: int = 0
                      ) -> tuple[dict[str, Any], dict[str, Any] | None]:
        """torch in float32, rounded to each output's dtype; and, for data coarser than the kernel's
        arithmetic, the rounding envelope of a kernel that stores its intermediates in that dtype."""
        reply, blobs = self._ask({"op": "baseline_fp32", "case": case.token(), "case_id": case.id, "salt": salt,
                                  "like": output_dtypes(like)})
        storage = reply.get("storage")
        return (wire.decode_dict(reply["baseline"], blobs, self.device),
                wire.decode_dict(storage, blobs, self.device) if storage is not None else None)


class TruthPending:
    """A truth asked for, read by a thread of its own; calling it waits for it (and raises what
    reading it raised). ``dtypes``: the output dtypes it was asked for."""

    def __init__(self, read: Callable[[], tuple[dict[str, Any], dict[str, Any], dict[str, Any]]],
                 dtypes: dict[str, str], reference: Reference) -> None:
        import threading

        self.dtypes, self.reference, self.taken = dtypes, reference, False
        self._result: tuple[dict[str, Any], dict[str, Any], dict[str, Any]] | None = None
        self._error: BaseException | None = None

        def run() -> None:
            try:
                self._result = read()
            except BaseException as exc:  # noqa: BLE001 - raised where it is waited for
                self._error = exc

        self._thread = threading.Thread(target=run, name="truth", daemon=True)
        self._thread.start()

    def __call__(self) -> tuple[dict[str, Any], dict[str, Any], dict[str, Any]]:
        import time

        start = time.monotonic()
        self._thread.join()
        self.reference.wait_s += time.monotonic() - start
        self.taken = True
        if self._error is not None:
            raise self._error
        assert self._result is not None
        return self._result


def _stats(reply: dict[str, Any]) -> dict[str, Any]:
    wire_stats = reply.get("wire")
    out = {str(k): v for k, v in wire_stats.items() if isinstance(v, (int, float))} if isinstance(wire_stats, dict) else {}
    for key in ("alive_s", "context_s"):  # its age, and how long making its CUDA context took
        if isinstance(reply.get(key), (int, float)):
            out[key] = round(float(reply[key]), 2)
    return out


def output_dtypes(like: dict[str, Any]) -> dict[str, str]:
    """The dtype of each tensor among ``like``'s values, by name (``"float32"``)."""
    import torch

    return {k: str(v.dtype).removeprefix("torch.") for k, v in like.items() if isinstance(v, torch.Tensor)}


@dataclasses.dataclass
class Workers:
    """A job's workers, as the judge sees them, once the spec imported in them: the candidate (the
    head's code), the reference and, in a differential run, the base's code on the same spec."""

    spec: Spec
    candidate: Candidate
    reference: Reference
    uses_triton: bool = False
    finished: dict[str, Any] | None = None
    base: Candidate | None = None
    base_missing: str | None = None  # why a differential job has no base to compare with
    load_s: float = 0.0  # the workers' start and their import of the spec, as the judge waited for it
    load_times: dict[str, float] = dataclasses.field(default_factory=dict)  # of which, in the candidate's worker
    base_load_times: dict[str, float] = dataclasses.field(default_factory=dict)  # the same, in the base's
    late_cuda_settings: list[str] = dataclasses.field(default_factory=list)  # set by the spec's import, too late
    interpreter: list[str] = dataclasses.field(default_factory=list)  # the Triton interpreter's adaptations in place

    def finish(self, compile_settings: Any = None) -> dict[str, Any]:
        if self.finished is None:
            self.finished = self.candidate.finish(compile_settings)
        return self.finished


def connect(job: Job, channels: dict[str, Channel], device: str, deadline: float) -> Workers:
    """Have the workers import the job's spec, all at once (each imports torch, the spec and the code
    it calls in its own process); the reference worker's description is the spec the judge works
    with. A spec that does not import is :class:`SpecDidNotImport`."""
    import time

    from ..protocol.jobs import base_commit

    from ..proc import alive_s

    start = time.monotonic()
    judge_alive_s = alive_s()  # the judge's own start, before it asks: timing only
    header = {"op": "load", "job": job.to_json()}
    base = channels.get("base") if base_commit(job) else None
    # the candidate first: in one process, the reference borrows the spec it imported
    asked: dict[str, WorkerLost | None] = {}
    for role, channel in (("candidate", channels["candidate"]), ("reference", channels["reference"]),
                          ("base", base)):
        if channel is None:
            continue
        try:
            channel.ask(header)
            asked[role] = None
        except WorkerLost as exc:
            asked[role] = exc
    try:
        uses_triton, load_times, late, adapted = _loaded(job, "candidate", channels["candidate"], asked["candidate"],
                                                         deadline)
    except BaseException:
        # The others were asked too: take their answers now, or the next ``load`` on these channels
        # (the job judged by another spec) would read this one's answer as its own.
        _drain({role: ch for role, ch in (("reference", channels["reference"]), ("base", base))
                if ch is not None and asked.get(role) is None}, deadline)
        raise
    _loaded(job, "reference", channels["reference"], asked["reference"], deadline)
    reference = Reference(channels["reference"], device, deadline)
    reply, _ = reference._ask({"op": "describe"})
    workers = Workers(spec_from_description(reply["spec"]), Candidate(channels["candidate"], device, deadline),
                      reference, uses_triton)
    if base_commit(job):
        workers.base, workers.base_missing, workers.base_load_times = _connect_base(base, asked.get("base"), device,
                                                                                    deadline)
    workers.load_s = time.monotonic() - start
    workers.load_times = {**load_times, "judge_alive_s": round(judge_alive_s, 2)}
    workers.late_cuda_settings = late
    workers.interpreter = adapted
    return workers


DRAIN_S = 60.0  # how long a worker's answer to an abandoned ``load`` is waited for


def _drain(channels: dict[str, Channel], deadline: float) -> None:
    """Read and drop the pending answer of each channel; one that does not answer is lost, and says so."""
    import time

    for channel in channels.values():
        try:
            channel.answer(min(deadline, time.monotonic() + DRAIN_S))
        except (WorkerLost, WorkerTimeout):
            pass  # the channel now knows it is lost: a later request says so instead of misreading


def _loaded(job: Job, role: str, channel: Channel, lost: WorkerLost | None, deadline: float
            ) -> tuple[bool, dict[str, float], list[str], list[str]]:
    """The answer to ``load`` from the candidate or the reference worker: whether the code it
    imported uses Triton (the candidate's answer), how long importing torch and the spec took
    there (for the timing report), the CUDA settings the import set too late and the Triton
    interpreter's adaptations in place (see worker.interpreter), or the error that ends the job."""
    try:
        if lost is not None:
            raise lost
        reply, _ = channel.answer(deadline)
    except WorkerTimeout as exc:
        raise WorkerTimeout(f"the {role} worker did not import the spec within the job's time budget") from exc
    except WorkerLost as exc:
        if role == "candidate":
            raise WorkerDied("the candidate's worker died while importing the spec and the code under test") from exc
        raise ContextLost(f"the reference worker died while importing the spec: {exc}") from exc
    if reply.get("error") == "spec-import":
        raise SpecDidNotImport(import_finding(job, SpecImportFacts.from_json(reply.get("facts"))))
    if reply.get("error"):
        raise ContextLost(f"the {role} worker failed: {reply.get('message')}")
    late = reply.get("late_cuda_settings")
    names = [str(n)[:100] for n in late[:20]] if isinstance(late, list) else []
    adapted = reply.get("interpreter")
    adaptations = [str(n)[:100] for n in adapted[:20]] if isinstance(adapted, list) else []
    return bool(reply.get("uses_triton")), _load_times(reply), names, adaptations


def _load_times(reply: dict[str, Any]) -> dict[str, float]:
    """What a worker says its start took (for the timing report only)."""
    times = {}
    for key in ("alive_s", "torch_import_s", "spec_import_s", "seed_s", "seed_wait_s", "seeded"):
        with contextlib.suppress(TypeError, ValueError):
            times[key] = round(float(reply.get(key) or 0.0), 2)
    return times


BASE_LOAD_S = 300.0  # how long the base's code may take to import, once the head's has


def _connect_base(channel: Channel | None, lost: WorkerLost | None, device: str, deadline: float
                  ) -> tuple[Candidate | None, str | None, dict[str, float]]:
    """The base's code with the same spec. When it cannot run (the kernel is new, the spec does not
    import at the base), the job judges by absolute rules only and says why: never more lenient."""
    import time

    if channel is None:
        return None, "the base's code was not available to this job", {}
    try:
        if lost is not None:
            raise lost
        reply, _ = channel.answer(min(deadline, time.monotonic() + BASE_LOAD_S))
    except WorkerTimeout:
        return None, "the base's code did not import the spec in time", {}
    except WorkerLost:
        return None, "the base's worker died while importing the spec", {}
    if reply.get("error") == "spec-import":
        msg = SpecImportFacts.from_json(reply.get("facts")).message.splitlines()[0]
        return None, f"the spec does not import against the base's code ({msg})", {}
    if reply.get("error"):
        return None, f"the base's worker failed: {reply.get('message')}", {}
    return BaseCandidate(channel, device, deadline), None, _load_times(reply)


class BaseCandidate(Candidate):
    """The base's code: asked the same questions as the candidate, but its failures are facts about
    the base, never the head's verdict. A base that dies or hangs is dropped, and the cases after it
    are judged by absolute rules (see ``equivalence.engine``)."""

    limit_s = 60.0  # one call's limit; the engine sets it from the time the head's code took

    def _send(self, header: dict[str, Any], blobs: Sequence[Any]) -> None:
        try:
            self.channel.ask(header, blobs)
        except WorkerLost as exc:
            raise BaseLost(f"the base's code crashed its worker{self._at()}") from exc

    def _answer(self) -> tuple[dict[str, Any], list[bytearray]]:
        import time

        try:
            return self.channel.answer(min(self.deadline, time.monotonic() + self.limit_s))
        except WorkerTimeout as exc:
            raise BaseLost(f"the base's code did not return{self._at()} in time") from exc
        except WorkerLost as exc:
            raise BaseLost(f"the base's code crashed its worker{self._at()}") from exc


class BaseLost(Exception):
    """The base's worker is gone or hung: no more differential answers in this job."""
