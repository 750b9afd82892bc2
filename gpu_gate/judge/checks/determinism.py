"""The determinism check: each case runs R times alone, then R times while background
kernels load the GPU on other streams, then R times with most SMs held. Outputs must agree
within tolerance; bitwise only where the spec declares ``deterministic=True`` (fp32 atomics
legitimately vary). A candidate that uses streams of its own is also repeated with the caller's
stream held back, so that its work there runs in the other order. A spec with ``producer=`` has
its named inputs written by a kernel just before a few more runs, on the caller's stream and on
another one (see gpu_gate.worker.producer): a kernel that reads them before its producer
finished differs there."""
from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Any

from ...findings import Finding, Severity, Status
from .fitting import RESERVED

if TYPE_CHECKING:
    import torch

    from ...protocol.cases import Case
    from ..equivalence.engine import CaseRunner
    from ..job import Context, Outcome
    from ..reference import Recipe
    from ..workers import Candidate, Workers
    from ...protocol.jobs import Job

CASES = 4
FEWER_SMS = "with three quarters of the SMs held by another kernel"  # see gpu_gate.worker.hold_sms
PRODUCED_ON_STREAM = "right after a kernel that writes {names} on the caller's stream"  # gpu_gate.worker.producer
PRODUCED_ON_EVENT = "after a kernel that writes {names} on another stream, ordered by an event"
CALLER_LATE = "with the caller's stream held back, so that the candidate's other streams run first"
DEFAULT_CONTENTION_GIB = 4.0  # one contention case, at most; a third of the free GPU memory at most
OOM_RETRIES = 3  # a contention case out of GPU memory is run again, each time at a quarter of its bytes


def run(job: Job, ctx: Context) -> Outcome:
    from ..job import Outcome

    workers = ctx.open_workers(job)
    spec = workers.spec
    if ctx.device not in spec.devices:
        return Outcome(Status.NOT_RUN, reason=f"spec {spec.name!r} runs only on {', '.join(spec.devices)}")
    return Determinism(job, ctx, workers).run()


MAX_DEBT = 3  # pre-existing nondeterministic cases reported before the job stops looking


def _pre_existing(f: Finding) -> Finding:
    import dataclasses

    return dataclasses.replace(f, message=f"pre-existing (the base's code is nondeterministic on the same case too): "
                                          f"{f.message}")


def _within_base(f: Finding, head_off: dict[str, float], base_off: dict[str, float], factor: float) -> Finding:
    """The head's runs differ, but none is further off the reference than ``factor`` times the
    base's own run on the same case: within the error the repository already accepts there, as
    the equivalence check judges accuracy against the base (``regression_factor``)."""
    import dataclasses

    said = ", ".join(f"{k!r}: this change's worst run {head_off[k]:.3g}, the base's {base_off[k]:.3g}"
                     for k in sorted(head_off))
    return dataclasses.replace(f, message=f"pre-existing (within the base's own error on the same case: the base's "
                                          f"code is as far off the reference there, within {factor:g}x; {said}): "
                                          f"{f.message}",
                               details={**f.details, "base_error_of": dict(base_off)})


def _against_steady_base(f: Finding, head_off: dict[str, float], base_off: dict[str, float]) -> Finding:
    """A new finding, with the spread of the base's code on the same case: its runs all agreed."""
    import dataclasses

    spread = "; ".join(f"{k!r}: this change's runs differ, off the reference by up to {head_off[k]:.3g}; the base's "
                       f"runs are identical, off it by {base_off.get(k, 0.0):.3g}" for k in sorted(head_off))
    runs = f.details.get("runs") or {}
    total = sum(int(n) for n in runs.values()) if isinstance(runs, dict) else 0
    said = (f" (the base's code, repeated {total + 1} times on the same inputs in the same settings, gave the same output "
            f"every time{': ' + spread if spread else ''})")
    return dataclasses.replace(f, message=f"{f.message}{said}",
                               details={**f.details, "base_spread": 0.0, "base_error_of": dict(base_off)})


class Determinism:
    def __init__(self, job: Job, ctx: Context, workers: Workers) -> None:
        from .equivalence import Equivalence

        eq = Equivalence(job, ctx, workers)
        self.job, self.ctx, self.spec, self.eq = job, ctx, workers.spec, eq
        self.runner: CaseRunner = eq.runner
        self.repeats = max(2, int(job.options.get("repeats") or 8))
        self.load = bool(job.options.get("concurrent_load", True))
        self.unheld: str | None = None  # why the runs on fewer SMs could not be made
        self.unheld_caller: str | None = None  # why the runs with the caller's stream held back could not be
        self.unproduced: str | None = None  # why the runs after a producer could not be made
        self._truth: tuple[str, Any] | None = None  # the last case's fetched reference: (case id, truth)
        self._errors_of: dict[str, float] | None = None  # outputs whose base error is asked; then the errors
        self.timing: dict[str, Any] = {"cases": []}  # where the job's time went (see run)
        self.contention_budget: int | None = None  # bytes the contention cases were built for
        self.max_reduction: int | None = None  # the schedule's longest reduction, as they were built
        self.memory_notes: list[Finding] = []  # cases run smaller, or not at all, for want of GPU memory
        # per case: the configs the head's autotuned kernels ran on its first call, which the base's code
        # is asked to run when it repeats the case (see CaseRunner._on_the_heads_configs)
        self._head_configs: dict[str, dict[str, dict[str, str]]] = {}

    def cases(self) -> list[Case]:
        """The contention cases first (many programs sharing locks, partial rows and hot
        indices; see gpu_gate.judge.equivalence.contention), then a few fuzzed ones."""
        from ...protocol.cases import Case, ScheduleOptions, allowed_dtypes, schedule
        from ..equivalence.contention import contention_cases
        from .equivalence import unsupported_dtypes

        if self.job.case:
            return [Case.from_token(self.job.case)]
        bad, _ = unsupported_dtypes(self.ctx, self.eq.workers)
        opts = ScheduleOptions.from_options({**self.job.options, "cases": CASES}, seed=self.eq.seed,
                                            budget=self.eq.budget, unsupported=bad)
        usable, _ = allowed_dtypes(self.spec, opts)
        busy: list[Case] = []
        if usable and self.job.options.get("contention", True):
            self.contention_budget, self.max_reduction = self._contention_budget(), opts.max_reduction
            busy = contention_cases(self.spec, self.eq.seed, usable[0], self.contention_budget, opts.max_reduction)
        return busy + schedule(self.spec, opts)

    def _contention_budget(self) -> int:
        from ..equivalence.contention import gpu_budget

        cap = float(self.job.options.get("contention_gib") or DEFAULT_CONTENTION_GIB)
        if self.ctx.device != "cuda":
            return self.eq.budget
        reserved = self.job.options.get(RESERVED)
        if reserved:  # what the executor reserved for this job on its GPU, which other jobs leave alone
            return gpu_budget(int(reserved), cap)
        import torch

        free, _ = torch.cuda.mem_get_info()
        return gpu_budget(int(free), cap)

    def run(self) -> Outcome:
        """The check, with where its time went (``extra.timing``: importing the spec in the
        workers, then each case's repeats on the head's code and, where it was asked, the base's)."""
        import time

        self.timing["load_s"] = round(float(getattr(self.eq.workers, "load_s", 0.0) or 0.0), 2)
        start = time.monotonic()
        out = self._run()
        self.timing["total_s"] = round(time.monotonic() - start, 2)
        if out.extra.timing is None:
            out.extra.timing = self.timing
        return out

    def _timed_case(self, case: Case, cand: Candidate, side: str) -> Finding | str | None:
        import time

        start = time.monotonic()
        self._parts: dict[str, float] = {}
        run0, compile0 = float(getattr(cand, "run_s", 0.0)), float(getattr(cand, "compile_s", 0.0))
        try:
            return self._case(case, cand)
        finally:
            # where the case's time went: the inputs, the first run, the reference, each setting's
            # repeats; of it, the worker's own count of running the candidate and of compiling
            parts = {k: round(v, 2) for k, v in self._parts.items()}
            parts["worker_run_s"] = round(float(getattr(cand, "run_s", 0.0)) - run0, 2)
            parts["worker_compile_s"] = round(float(getattr(cand, "compile_s", 0.0)) - compile0, 2)
            self.timing["cases"].append([case.id, side, round(time.monotonic() - start, 2), case.describe()[:120],
                                         parts])

    def _took_fetched(self) -> float:
        """The time the reference's fetch took since last asked (it has a part of its own)."""
        took, self._fetched_s = getattr(self, "_fetched_s", 0.0), 0.0
        return took

    def _lap(self, part: str, since: float) -> float:
        """Add the time since ``since`` to ``part`` of the case's timing; now."""
        import time

        now = time.monotonic()
        parts = getattr(self, "_parts", None)
        if parts is not None:
            parts[part] = parts.get(part, 0.0) + now - since
        return now

    def _run(self) -> Outcome:
        from ..equivalence.engine import ContextLost, SpecBroken
        from ..workers import WorkerDied
        from ..job import Outcome

        ran = 0
        debt: list[Finding] = []  # nondeterminism the base's code shows on the same case too
        try:
            for case in self.cases():
                case, finding = self._head_case(case)
                if isinstance(finding, str):  # refused: the equivalence check reports it
                    continue
                ran += 1
                if finding is None:
                    continue
                finding = self._against_base(case, finding)
                if finding.details.get("change") == "pre-existing":
                    debt.append(finding)
                    if len(debt) < MAX_DEBT:
                        continue  # the base has it too: look on for what this change brings
                found = [finding, *debt] if finding not in debt else debt
                return Outcome(Status.FAILED, found + self.memory_notes, cases=ran)
        except ContextLost as exc:
            if isinstance(exc, WorkerDied):
                raise  # the job's verdict: a crash (see judge.job._run_check)
            return Outcome(Status.FAILED, [self._finding("cuda-error", f"the kernel broke the CUDA context: {exc}")],
                           cases=ran, reason="CUDA context lost")
        except SpecBroken as exc:
            return Outcome(Status.ERROR, [self._finding("reference-error", str(exc))], cases=ran, reason=str(exc))
        if ran == 0 and self.memory_notes:  # nothing was checked: not a pass, and not the kernel's failure
            return Outcome(Status.ERROR, [self._finding("out-of-memory", "; ".join(n.message for n in self.memory_notes))],
                           reason="no case fit in the GPU's memory left to this job")
        if ran == 0:
            return Outcome(Status.ERROR, [self._finding("refused", "the candidate refused every case: nothing was "
                                                                   "checked for determinism")],
                           reason="every case was refused")
        notes = list(self.memory_notes)
        notes += [self._note_unheld(FEWER_SMS, self.unheld)] if self.unheld else []
        notes += [self._note_unheld(CALLER_LATE, self.unheld_caller)] if self.unheld_caller else []
        if self.unproduced:  # the spec asked for these runs: not made is not passed
            notes.append(self._finding("producer-unavailable", f"the runs after a producer (producer=) could not be "
                                       f"made: {self.unproduced}; install gpu-gate's GPU extra (CuPy) on the runner"))
            return Outcome(Status.FAILED, debt + notes, cases=ran)
        if debt:
            return Outcome(Status.FAILED, debt + notes, cases=ran)
        return Outcome(Status.PASSED, notes, cases=ran)

    def _head_case(self, case: Case) -> tuple[Case, Finding | str | None]:
        """``case`` repeated on the head's code, and the case that ran. Other gates share the GPU,
        and what is free changes while a job runs: a contention case that runs out of GPU memory
        (the candidate's run or the float64 reference) is built again at a quarter of the bytes,
        up to OOM_RETRIES times, and a note says so; a fuzzed case that does is left to the
        equivalence check, which runs it too (a note here). Never an error of the job's."""
        from ...protocol.cases import case_bytes
        from ..workers import ReferenceOutOfMemory
        from .fitting import free_cached, is_oom

        budget = self.contention_budget
        for _ in range(OOM_RETRIES + 1):
            try:
                finding = self._timed_case(case, self.runner.candidate, "head")
            except ReferenceOutOfMemory:
                finding = "oom"
            except Exception as exc:  # noqa: BLE001 - the judge's own arithmetic ran out of GPU memory
                if not is_oom(exc):
                    raise
                free_cached()
                finding = "oom"
            if finding != "oom":
                return case, finding
            size = case_bytes(self.spec, case.dims, case.inputs)
            smaller = self._smaller_contention(case, min(budget or size, size) // 4)
            if smaller is None:
                self.memory_notes.append(self._memory_note(
                    f"case {case.id} ran out of GPU memory at {size / 2**20:.0f} MiB and was not repeated "
                    f"({'the smallest contention case tried' if case.id.startswith('k') else 'the equivalence check runs it too'}"
                    f"); other work shares the GPU"))
                return case, "oom"
            self.memory_notes.append(self._memory_note(
                f"contention case {case.id} ran out of GPU memory at {size / 2**20:.0f} MiB (other work shares the GPU); "
                f"run again at {case_bytes(self.spec, smaller.dims, smaller.inputs) / 2**20:.0f} MiB: {smaller.describe()}"))
            case, budget = smaller, min(budget or size, size) // 4
        return case, "oom"

    def _smaller_contention(self, case: Case, budget: int) -> Case | None:
        """The contention case of ``case``'s id built within ``budget`` bytes; None for a fuzzed
        case, or where it comes out no smaller."""
        from ...protocol.cases import case_bytes
        from ..equivalence.contention import contention_cases

        if not case.id.startswith("k") or budget <= 0:
            return None
        dtype = next((c.dtype for k, c in case.inputs.items() if k in self.spec.inputs and c.dtype.startswith("float")),
                     None)
        if dtype is None:
            return None
        more = [self.max_reduction] if self.max_reduction else []
        built = contention_cases(self.spec, self.eq.seed, dtype, budget, *more)
        again = next((c for c in built if c.id == case.id), None)
        before = case_bytes(self.spec, case.dims, case.inputs)
        if again is None or case_bytes(self.spec, again.dims, again.inputs) >= before:
            return None
        return again

    def _memory_note(self, message: str) -> Finding:
        import dataclasses

        from ...findings import Severity

        return dataclasses.replace(self._finding("out-of-memory", message), severity=Severity.NOTE)

    def _note_unheld(self, setting: str, why: str) -> Finding:
        import dataclasses

        from ...findings import Severity

        f = self._finding("amplifier-unavailable", f"the repeats {setting} did not run: {why} (the repeats alone "
                                                   f"and under load did)")
        return dataclasses.replace(f, severity=Severity.NOTE)

    def _against_base(self, case: Case, finding: Finding) -> Finding:
        """On a pull request, the same case repeated on the base's code: nondeterminism it shows too
        is the repository's debt (pre-existing), otherwise this change's (new). A base that cannot
        answer leaves the finding as it is: judged by absolute rules."""
        from ..equivalence.engine import ContextLost, marked
        from ..workers import BaseLost
        from .spread import wider_than_base

        base = self.runner.base
        if base is None:
            return finding
        head_off = {str(k): float(v) for k, v in (finding.details.get("worst_error_of") or {}).items()}
        self._errors_of = dict.fromkeys(head_off, 0.0)
        from ..workers import ReferenceOutOfMemory
        from .fitting import free_cached, is_oom

        # the same configs as the head's ran, where the base's lists have them: a config that varies
        # from run to run is the base's debt too, whichever config its own turn gave this case
        base.autotune = self._head_configs.get(case.id, {})
        try:
            again = self._timed_case(case, base, "base")
        except (BaseLost, ContextLost) as exc:
            self.runner.base, self.runner.base_lost = None, f"{exc} (case {case.id})"
            return finding
        except ReferenceOutOfMemory:
            again = "oom"
        except Exception as exc:  # noqa: BLE001 - the judge's own arithmetic ran out of GPU memory
            if not is_oom(exc):
                raise
            free_cached()
            again = "oom"
        finally:
            base_off, self._errors_of = self._errors_of or {}, None
            base.autotune = {}
        if again == "oom":  # not known: judged by absolute rules
            return marked(finding, "new", "the base's code was not repeated: out of GPU memory")
        if isinstance(again, str):
            return marked(finding, "new", "the base's code refused this case")
        factor = float(getattr(self.runner, "regression_factor", 4.0))
        if again is not None:
            return wider_than_base(finding, again, factor) or _pre_existing(marked(finding, "pre-existing"))
        # deterministic=True: any difference is the defect, however accurate the runs
        within = head_off and all(0 < base_off.get(k, 0.0) and h <= factor * base_off[k] for k, h in head_off.items())
        if within and not self.spec.deterministic:
            return _within_base(marked(finding, "pre-existing"), head_off, base_off, factor)
        return _against_steady_base(marked(finding, "new"), head_off, base_off)

    def _finding(self, kind: str, message: str, case: Case | None = None) -> Finding:
        from .equivalence import repro_command

        assert self.job.spec is not None
        repro = repro_command(self.job, "determinism").format(token=case.token()) if case else None
        return Finding(check="determinism", kind=kind, spec=self.job.spec.id, case=case.id if case else None,
                       repro=repro, message=message,
                       details={"token": case.token(), "case": case.describe()} if case else {})

    def _case(self, case: Case, cand: Candidate) -> Finding | str | None:
        """``case`` repeated on ``cand``: the head's code, or the base's (a differential run)."""
        from ...protocol.inputs import materialize

        import time

        r = self.runner
        t = time.monotonic()
        m = materialize(self.spec, case, self.ctx.device)
        upstream = r.ref.upstream(case)
        t = self._lap("inputs_s", t)
        # The first run's outputs stay in the worker; each repeat is compared with them there,
        # and only the outputs that differ bitwise come back to be judged.
        # (what the call wrote into its inputs is not looked at here: put back by the worker, unsent)
        rep = cand.call(case, upstream, inputs=m, hold=True, inputs_back=False)
        self._lap("first_run_s", t)
        if cand is r.candidate:
            self._head_configs[case.id] = rep.configs
        try:
            if rep.status != "ok":
                return "oom" if rep.status == "oom" else "refused"  # the equivalence check reports it
            first = rep.outputs
            truth: list[tuple[dict[str, object], dict[str, object], dict[str, object]]] = []

            def reference() -> tuple[dict[str, object], dict[str, object], dict[str, object]]:
                # The float64 reference, the baseline and the rounding envelope, asked for the first
                # time a repeat differs bitwise from the first run: repeats that all agree need
                # none of it (on an H100, 3 s of a contention case went to receiving it).
                if not truth:
                    if self._truth is not None and self._truth[0] == case.id:  # the head's, for the base
                        truth.append(self._truth[1])
                        return truth[0]
                    start = time.monotonic()
                    truth.append(r.ref.truth(case, first))
                    self._fetched_s = self._lap("reference_s", start) - start  # not the repeat's lap too
                    self._truth = (case.id, truth[0])
                return truth[0]

            found = self._repeat(cand, case, upstream, first, reference, rep.side_streams > 0)
            if found is None and self._errors_of is not None:
                # the base's code, whose runs agree: how far its run is off the reference, on the
                # outputs where the head's runs differ (see _against_base)
                ref = reference()[0]
                self._errors_of = {k: _error(first.get(k), ref.get(k)) for k in self._errors_of}
            return found
        finally:
            cand.release()

    def _repeat(self, cand: Candidate, case: Case, upstream: Recipe | None, first: dict[str, object],
                reference: Any, side_streams: bool = False) -> Finding | None:
        """Every repeat runs, alone and then under load, even after one differs: the finding says how
        many of them differed in each setting and how far the worst landed from the reference (a
        race that fires once in eight runs and one that fires every time read differently)."""
        from ..equivalence.compare import agree

        found: tuple[str, int, str] | None = None  # the first difference: why, which run, in which setting
        differed: dict[str, int] = {}
        runs: dict[str, int] = {}
        worst = 0.0
        worst_of: dict[str, float] = {}  # per output that differed: the worst run's distance from the reference
        spread: dict[str, float] = {}  # per output: the largest difference of a repeat from the first run
        settings = repeat_settings(self.ctx.device, self.load, self.repeats, self.spec.producer, side_streams)
        produced = [x for x in settings if "produce" in x[1]]
        import time

        for when, how, repeats in settings:
            differed[when], runs[when] = 0, repeats
            lap, t = "repeats_" + next(iter(how), "alone") + "_s", time.monotonic()
            for i in range(repeats):
                t = self._lap(lap, t + self._took_fetched())  # the run before
                # what the call wrote into its inputs is put back in the worker, not sent: only the
                # outputs are compared here (a backward that reuses its inputs' memory, as Liger's
                # GEGLU does, would send both inputs back with every repeat)
                rep = cand.call(case, upstream, compare_held=True, inputs_back=False, **how)
                if isinstance(rep.held_sms, str):  # no CuPy, say: these runs would be runs alone
                    self.unheld = rep.held_sms
                    del differed[when]
                    break
                if isinstance(rep.held_caller, str):
                    self.unheld_caller = rep.held_caller
                    del differed[when]
                    break
                if isinstance(rep.produced, str):
                    self.unproduced = rep.produced
                    del differed[when]
                    break
                if rep.status != "ok":
                    return self._finding("nondeterministic", f"a repeated run on the same inputs raised "
                                                             f"{rep.message} (case {case.describe()})", case)
                bad = None
                for k, v in first.items():
                    if k in rep.same_as_held:
                        continue
                    spread[k] = max(spread.get(k, 0.0), _error(rep.outputs.get(k), v))
                    ref, base, envelope = reference()
                    if k not in ref:
                        continue
                    why = agree(k, v, rep.outputs.get(k), bitwise=self.spec.deterministic, ref=ref[k],
                                base=base.get(k), rule=self.eq.rule, perturbed=envelope.get(k))
                    if why:
                        bad = bad or why
                        off = max(_error(v, ref[k]), _error(rep.outputs.get(k), ref[k]))
                        worst, worst_of[k] = max(worst, off), max(worst_of.get(k, 0.0), off)
                if bad:
                    differed[when] += 1
                    found = found or (bad, i, when)
            self._lap(lap, t + self._took_fetched())
        if found is None:
            return None
        why, i, when = found
        tally = " and ".join(f"{n} of {runs[w]} runs {w}" for w, n in differed.items())
        early = {w for w, *_ in produced}
        if all(n == 0 or w in early for w, n in differed.items()):
            names = ", ".join(repr(n) for n in self.spec.producer)
            f = self._finding("read-before-producer", f"{why} (in the runs where a kernel writes {names} just before "
                                                      f"the call: {tally}; never alone or under load). The kernel "
                                                      f"reads {names} before the kernel that writes them has finished: "
                                                      f"with programmatic dependent launch, wait for it first "
                                                      f"(tl.extra.cuda.gdc_wait() in Triton, "
                                                      f"cudaGridDependencySynchronize() in CUDA); on a stream of its "
                                                      f"own, make that stream wait for the caller's "
                                                      f"(side.wait_stream(torch.cuda.current_stream())); worst run off "
                                                      f"the reference by up to {worst:.3g}; case {case.describe()}",
                              case)
        else:
            hint = ("; only with the caller's stream held back: work on another stream reads what the caller's "
                    "stream writes without waiting for it (make that stream wait first: "
                    "side.wait_stream(torch.cuda.current_stream()))"
                    if all(n == 0 or w == CALLER_LATE for w, n in differed.items()) else "")
            f = self._finding("nondeterministic", f"{why} (first in run {i + 2} of {runs[when] + 1}, {when}; "
                                                  f"differed from the first run in {tally}; the worst run is off the "
                                                  f"reference by up to {worst:.3g}; case {case.describe()}{hint})",
                              case)
        f.details.update({"runs_differed": differed, "repeats": self.repeats, "runs": runs, "worst_error": worst,
                          "worst_error_of": worst_of, "spread_of": spread})
        return f


def repeat_settings(device: str, load: bool, repeats: int, producer: tuple[str, ...], side_streams: bool
                    ) -> list[tuple[str, dict[str, object], int]]:
    """The settings a case is repeated in, in order: (what the finding calls it, how the worker is
    asked to run, how many runs). Alone always; on a GPU, under load and on fewer SMs; with the
    caller's stream held back where the candidate used streams of its own (every other setting
    delays those: the launch order the other way round); after a producer where the spec names one
    (fewer runs: a read before the producer finished shows on nearly every one)."""
    settings: list[tuple[str, dict[str, object], int]] = [("alone", {}, repeats)]
    if device != "cuda":
        return settings
    if load:
        settings.append(("under concurrent load on other streams", {"load": True}, repeats))
        settings.append((FEWER_SMS, {"hold_sms": True}, repeats))
        if side_streams:
            settings.append((CALLER_LATE, {"hold_caller": True}, repeats))
    if producer:
        names = ", ".join(repr(n) for n in producer)
        few = max(2, repeats // 4)
        settings.append((PRODUCED_ON_STREAM.format(names=names), {"produce": "stream", "producer": producer}, few))
        settings.append((PRODUCED_ON_EVENT.format(names=names), {"produce": "event", "producer": producer}, few))
    return settings


def _error(out: object, ref: object) -> float:
    """The largest absolute difference of an output from the reference (0 where it cannot say).

    The judge shares the GPU with other gates: it takes the difference a slice at a time (a float64
    copy of a whole 4 GiB contention output is twice its size again), and where even a slice does not
    fit in the GPU's memory any more, on the CPU. Running out of memory here says nothing of the kernel."""
    import torch

    from .fitting import free_cached, is_oom

    if not isinstance(out, torch.Tensor) or not isinstance(ref, torch.Tensor) or out.shape != ref.shape \
            or not out.numel():
        return 0.0
    try:
        return _max_abs_diff(out, ref, out.device)
    except Exception as exc:  # noqa: BLE001 - only running out of memory is retried
        if not is_oom(exc):
            raise
        free_cached()
        return _max_abs_diff(out, ref, torch.device("cpu"))


_SLICE = 1 << 22  # elements of one slice of the difference (32 MiB in float64)


def _max_abs_diff(out: torch.Tensor, ref: torch.Tensor, device: torch.device) -> float:
    """max |out - ref| in float64 on ``device``, a slice along the first dimension at a time (NaN: inf)."""
    import torch

    if out.dim() == 0:
        out, ref = out.reshape(1), ref.reshape(1)
    rows = out.shape[0]
    step = max(1, _SLICE // max(1, out[0].numel()))
    worst = 0.0
    for i in range(0, rows, step):
        a = out[i:i + step].detach().to(device=device, dtype=torch.float64)
        b = ref[i:i + step].detach().to(device=device, dtype=torch.float64)
        d = torch.nan_to_num((a - b).abs(), nan=float("inf"))
        worst = max(worst, float(d.max()))
        del a, b, d
    return worst
