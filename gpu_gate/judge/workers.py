"""The judge's handles on its workers, and the spec as the judge knows it.

:class:`Candidate` sends a case's inputs to the candidate worker (or the base's) and reads back a
:class:`CallReport` of plain tensors and facts; :class:`~gpu_gate.judge.reference.Reference` asks
the reference worker for the truth on a case. Neither hands the judge an object a worker made:
every request is a typed record, every reply is read into one against what was asked
(:mod:`gpu_gate.protocol.messages`), and tensors are rebuilt here from bytes.
"""
from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from typing import Any

from ..findings import Finding
from ..protocol import wire
from ..protocol.cases import Case
from ..protocol.guard import geometry
from ..protocol.inputs import Materialized
from ..protocol.jobs import Job
from ..protocol.messages import (Ahead, AheadDone, AheadDoneReply, AheadReply, Call, CallDone, CallFailed, ErrorReply,
                                 Finish, FinishReply, Geometry, GuardedInput, Load, LoadReply, Release, Reply, Request,
                                 SpecImportFacts, SpecImportReply, Stats, Time, Timed, tensors)
from ..spec import Spec
from .channel import Channel, ProtocolViolation, WorkerLost, WorkerTimeout, violation
from .limits import reply_budget
from .reference import Recipe, Reference, TruthPending, output_dtypes, spec_from_description
from .replies import ContextLost, ReferenceOutOfMemory, SpecBroken, WorkerDied, check, expect, reading, stats_of

__all__ = ["BaseCandidate", "BaseLost", "CallReport", "Candidate", "ContextLost", "ProtocolViolation", "Reference",
           "ReferenceOutOfMemory", "SpecBroken", "SpecDidNotImport", "TruthPending", "WorkerDied", "Workers", "connect",
           "import_finding", "output_dtypes", "spec_from_description"]


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


@dataclasses.dataclass
class CallReport:
    status: str  # ok, refused, unsupported, oom, fatal
    message: str = ""
    trace: str | None = None
    outputs: dict[str, object] = dataclasses.field(default_factory=dict)  # plain tensors (or values)
    types: dict[str, str] = dataclasses.field(default_factory=dict)  # outputs that were not plain tensors
    early: dict[str, object] = dataclasses.field(default_factory=dict)  # copies taken at return that differ
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
    # the config each autotuned kernel ran for each key, as the worker says (kernel -> {key: config})
    configs: dict[str, dict[str, str]] = dataclasses.field(default_factory=dict)


class Candidate:
    def __init__(self, channel: Channel, device: str, deadline: float, spec: Spec | None = None) -> None:
        self.channel, self.device, self.deadline = channel, device, deadline
        self.spec = spec  # the judged spec: what a case's replies may carry is counted from it
        self.case: str | None = None  # the case the last call ran, for messages
        self.busy_s = 0.0  # time the judge waited on this worker (its runs, compiles and the transfers)
        # as the worker reports them (for the timing report, never a verdict): time in the calls
        # themselves (compiles included), and in compiling Triton kernels
        self.run_s = 0.0
        self.compile_s = 0.0
        # the upstream gradient the worker holds from the last call it answered: (case, the recipe sent)
        self._upstream_held: tuple[str, Recipe | None] | None = None
        self._upstream_pending: tuple[str, Recipe | None] | None = None
        # under compute-sanitizer: the worker hands the candidate tensors with no guard band, so
        # that the tool sees every access past a tensor's end (the guard band would absorb it)
        self.exact = False
        # configs its autotuned kernels are to run on, per key, with every call (the base's code on the
        # head's configs: see gpu_gate.worker.autotune); empty: its own
        self.autotune: dict[str, dict[str, str]] = {}

    def call(self, *args: Any, **kwargs: Any) -> CallReport:
        import time

        start = time.monotonic()
        try:
            return self._call(*args, **kwargs)
        finally:
            self.busy_s += time.monotonic() - start

    def _ask(self, request: Request, blobs: Sequence[wire.Blob] = (), budget: int = 0) -> tuple[Reply, list[bytearray]]:
        self._send(request, blobs, budget)
        return self._answer()

    def call_later(self, case: Case, upstream: Recipe | None, **kwargs: Any) -> Callable[[], CallReport]:
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

    def _call(self, case: Case, upstream: Recipe | None, **kwargs: Any) -> CallReport:
        self._send_call(case, upstream, **kwargs)
        return self._read_call()

    def _send_call(self, case: Case, upstream: Recipe | None, *, inputs: Materialized | None = None,
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
        sent = None
        if inputs is not None:
            sent = {k: GuardedInput(tensors.encode_tensor(g.buffer, blobs), Geometry.from_json(geometry(g), k))
                    for k, g in inputs.guarded.items()}
        again_refill = None
        if refill is not None:
            again_refill = {k: tensors.encode_tensor(g.buffer, blobs) for k, g in refill.guarded.items()}
        request = Call(dims=dict(case.dims), grad_layout=case.grad_layout, hold=hold, early=early, load=load,
                       compare_held=compare_held, relocate=relocate, plain=plain, hold_sms=hold_sms, exact=self.exact,
                       produce=produce, producer=tuple(producer), hold_caller=hold_caller, inputs_back=inputs_back,
                       upstream=None if again else upstream, upstream_again=again, inputs=sent, refill=again_refill,
                       autotune=self.autotune)
        self._send(request, blobs, self._budget(case))

    def _budget(self, case: Case) -> int:
        assert self.spec is not None, "a candidate is asked to call once the spec is known"
        return reply_budget(self.spec, case)

    def _send(self, request: Request, blobs: Sequence[wire.Blob], budget: int = 0) -> None:
        try:
            self.channel.ask(request, blobs, budget)
        except WorkerLost as exc:
            raise WorkerDied(f"the candidate's worker died{self._at()}") from exc

    def _at(self) -> str:
        return f" on case {self.case}" if self.case else ""

    def _answer(self) -> tuple[Reply, list[bytearray]]:
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
        check(reply, "candidate")
        self._upstream_held = self._upstream_pending
        if isinstance(reply, CallFailed):
            if reply.status == "fatal":
                raise ContextLost(reply.message)
            return CallReport(reply.status, reply.message, reply.trace)
        done = expect(reply, CallDone, self.channel)
        self.run_s += max(0.0, done.run_s)
        self.compile_s = max(self.compile_s, done.compile_s)
        with reading(self.channel, "call"):
            return self._report(done, got)

    def _report(self, done: CallDone, got: list[bytearray]) -> CallReport:
        dev = self.device
        return CallReport(
            "ok", outputs={k: tensors.decode_value(m, got, dev) for k, m in done.outputs.items() if m.kind != "held"},
            types={k: m.type_name for k, m in done.outputs.items() if m.kind == "tensor" and not m.plain},
            early={k: tensors.decode_tensor(m, got, dev) for k, m in done.early.items()},
            same_as_held=frozenset(done.same_as_held), where={k: list(v) for k, v in done.where.items()},
            held_where={k: list(v) for k, v in done.held_where.items()},
            input_spans={k: list(v) for k, v in done.input_spans.items()},
            inputs_changed={k: tensors.decode_tensor(m, got, dev) for k, m in done.inputs_changed.items()
                            if m is not None},
            watch=[(list(w.shape), bytes(got[w.head.blob]), bytes(got[w.tail.blob])) for w in done.watch],
            side_streams=done.side_streams, held_sms=done.held_sms, produced=done.produced,
            held_caller=done.held_caller, configs=done.configs)

    def time(self, repeats: int, warmup: int = 1, *, fresh: bool = True, flush: bool = True) -> Timed | str:
        """Time the last call's case again (the speed check; see worker.timing): each run's seconds as
        the worker reports them, or why it could not. A worker whose context died raises ContextLost."""
        import time

        start = time.monotonic()
        try:
            reply, _ = self._ask(Time(repeats, warmup, fresh, flush))
        finally:
            self.busy_s += time.monotonic() - start
        if isinstance(reply, ErrorReply):
            if reply.error == "fatal":
                raise ContextLost(reply.message)
            return reply.message or reply.error
        timed = expect(reply, Timed, self.channel)
        if len(timed.seconds) != repeats:
            raise violation(self.channel.name, "time", wire.BadMessage(
                f"{len(timed.seconds)} timings where {repeats} were asked"))
        return timed

    def release(self) -> None:
        """Let the worker drop the outputs it holds. Cleanup: a worker already lost (the error
        that lost it is the one being reported) is left alone."""
        if getattr(self.channel, "lost", None) is None:
            self._ask(Release())

    def finish(self, compile_settings: dict[str, object] | None = None) -> FinishReply:
        reply, _ = self._ask(Finish(compile_settings))
        return FinishReply() if isinstance(reply, ErrorReply) else expect(reply, FinishReply, self.channel)

    def ahead_done(self) -> dict[str, object]:
        """End the worker's compiling sibling; what it says it did (timing only, never a verdict)."""
        reply, _ = self._ask(AheadDone())
        return {} if isinstance(reply, ErrorReply) else dict(expect(reply, AheadDoneReply, self.channel).ahead)

    def stats(self) -> dict[str, object]:
        """What the worker says it moved through the channel (timing only, never a verdict)."""
        return stats_of(self._ask(Stats())[0], self.channel)

    def ahead(self, cases: Sequence[Case]) -> str | None:
        """Have the worker compile the kernels of ``cases`` ahead, beside it (see worker.ahead); why
        it does not, or None. It decides nothing: the worker's own calls run as they would."""
        reply, _ = self._ask(Ahead(tuple(c.token() for c in cases)))
        if isinstance(reply, ErrorReply):
            return reply.message or reply.error
        answer = expect(reply, AheadReply, self.channel)
        return None if answer.ok else (answer.skipped or "no answer")


@dataclasses.dataclass
class Workers:
    """A job's workers, as the judge sees them, once the spec imported in them: the candidate (the
    head's code), the reference and, in a differential run, the base's code on the same spec."""

    spec: Spec
    candidate: Candidate
    reference: Reference
    uses_triton: bool = False
    finished: FinishReply | None = None
    base: Candidate | None = None
    base_missing: str | None = None  # why a differential job has no base to compare with
    load_s: float = 0.0  # the workers' start and their import of the spec, as the judge waited for it
    load_times: dict[str, float] = dataclasses.field(default_factory=dict)  # of which, in the candidate's worker
    base_load_times: dict[str, float] = dataclasses.field(default_factory=dict)  # the same, in the base's
    late_cuda_settings: list[str] = dataclasses.field(default_factory=list)  # set by the spec's import, too late
    interpreter: list[str] = dataclasses.field(default_factory=list)  # the Triton interpreter's adaptations in place

    def finish(self, compile_settings: dict[str, object] | None = None) -> FinishReply:
        if self.finished is None:
            self.finished = self.candidate.finish(compile_settings)
        return self.finished


def connect(job: Job, channels: dict[str, Channel], device: str, deadline: float) -> Workers:
    """Have the workers import the job's spec, all at once (each imports torch, the spec and the code
    it calls in its own process); the reference worker's description is the spec the judge works
    with. A spec that does not import is :class:`SpecDidNotImport`."""
    import time

    from ..proc import alive_s
    from ..protocol.jobs import base_commit

    start = time.monotonic()
    judge_alive_s = alive_s()  # the judge's own start, before it asks: timing only
    request = Load(job)
    base = channels.get("base") if base_commit(job) else None
    # the candidate first: in one process, the reference borrows the spec it imported
    asked: dict[str, WorkerLost | None] = {}
    for role, channel in (("candidate", channels["candidate"]), ("reference", channels["reference"]),
                          ("base", base)):
        if channel is None:
            continue
        try:
            channel.ask(request)
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
    spec = reference.describe()
    workers = Workers(spec, Candidate(channels["candidate"], device, deadline, spec), reference, uses_triton)
    if base_commit(job):
        workers.base, workers.base_missing, workers.base_load_times = _connect_base(base, asked.get("base"), device,
                                                                                    deadline, spec)
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
    if isinstance(reply, SpecImportReply):
        raise SpecDidNotImport(import_finding(job, reply.facts))
    if isinstance(reply, ErrorReply):
        raise ContextLost(f"the {role} worker failed: {reply.message}")
    loaded = expect(reply, LoadReply, channel)
    names = [n[:100] for n in loaded.late_cuda_settings[:20]]
    adaptations = [n[:100] for n in loaded.interpreter[:20]]
    return bool(loaded.uses_triton), _load_times(loaded), names, adaptations


def _load_times(reply: LoadReply) -> dict[str, float]:
    """What a worker says its start took (for the timing report only)."""
    return {key: round(getattr(reply, key), 2) for key in LoadReply.TIMES}


BASE_LOAD_S = 300.0  # how long the base's code may take to import, once the head's has


def _connect_base(channel: Channel | None, lost: WorkerLost | None, device: str, deadline: float, spec: Spec
                  ) -> tuple[Candidate | None, str | None, dict[str, float]]:
    """The base's code with the same spec. When it cannot run (the kernel is new, the spec does not
    import at the base), the job judges by absolute rules only and says why: never more lenient.
    A base's worker that breaks the protocol fails the job closed, as the head's does."""
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
    if isinstance(reply, SpecImportReply):
        msg = reply.facts.message.splitlines()[0]
        return None, f"the spec does not import against the base's code ({msg})", {}
    if isinstance(reply, ErrorReply):
        return None, f"the base's worker failed: {reply.message}", {}
    return BaseCandidate(channel, device, deadline, spec), None, _load_times(expect(reply, LoadReply, channel))


class BaseCandidate(Candidate):
    """The base's code: asked the same questions as the candidate, but its failures are facts about
    the base, never the head's verdict. A base that dies or hangs is dropped, and the cases after it
    are judged by absolute rules (see ``equivalence.engine``)."""

    limit_s = 60.0  # one call's limit; the engine sets it from the time the head's code took

    def _send(self, request: Request, blobs: Sequence[wire.Blob], budget: int = 0) -> None:
        try:
            self.channel.ask(request, blobs, budget)
        except WorkerLost as exc:
            raise BaseLost(f"the base's code crashed its worker{self._at()}") from exc

    def _answer(self) -> tuple[Reply, list[bytearray]]:
        import time

        try:
            return self.channel.answer(min(self.deadline, time.monotonic() + self.limit_s))
        except WorkerTimeout as exc:
            raise BaseLost(f"the base's code did not return{self._at()} in time") from exc
        except WorkerLost as exc:
            raise BaseLost(f"the base's code crashed its worker{self._at()}") from exc


class BaseLost(Exception):
    """The base's worker is gone or hung: no more differential answers in this job."""
