"""The speed check: is the head's code slower than the base's on the same cases, and by how much.

On a pull request whose spec exists at the base, the base's code and the head's run in workers of
their own (as in the differential runs of the other checks). For each of a few cases (the largest the
schedule builds within the case budget, one per dtype first, plain layouts: the shapes a training step
runs), both are called once on the same inputs (compiling, autotuning, checking they run), then timed
in interleaved rounds: base then head, head then base, ... Each round, each side's figure is the
median of a few timed runs, each on fresh copies of the inputs after the L2 cache was overwritten (see
``gpu_gate.worker.timing``). Head over base, round by round, gives the pairs that
``gpu_gate.judge.speed`` turns into a ratio with its confidence interval: per case, and over all pairs.

A slow-down whose interval lies wholly beyond ``1 + threshold`` is a ``slower`` finding, which blocks
where the check is ``required``. A speed-up that should not be possible is ``implausible-speedup``: a
warning where the head is more than ``IMPLAUSIBLE`` times faster at that confidence (KernelBench's own
warning sign for a kernel that skips work), and an error, under the same level, where the head's time is
below what writing its outputs once takes at the GPU's peak memory bandwidth, or below what the reference's
operations on the case take at the GPU's peak arithmetic rate (``gpu_gate.judge.roofline``).
Every job says its figures in a ``speed`` note (speed-up, slow-down or no change shown, the interval,
the timing method, the SM clock). Without a base (a new spec, or the base's code no longer runs) there is
nothing to compare: said, not failed. The figures are the workers' word: evidence of speed, never of
correctness, which the other checks judge.
"""
from __future__ import annotations

import statistics
from typing import TYPE_CHECKING

from ...findings import Finding, Severity, Status

if TYPE_CHECKING:
    from ...protocol.cases import Case
    from ...protocol.jobs import Job
    from ..job import Context, Outcome
    from ..workers import Candidate, Workers
    from ..speed import SpeedComparison

CASES = 2  # cases timed per spec
ROUNDS = 10  # interleaved rounds per case: each gives one pair (head, base)
REPEATS = 5  # timed runs per side and round; the round's figure is their median
WARMUP = 3  # untimed runs per side before a case's first round
CANDIDATES = 32  # cases the schedule is asked for, to pick the largest from
IMPLAUSIBLE = 10.0  # a speed-up beyond this (the whole interval) is a warning sign


def run(job: Job, ctx: Context) -> Outcome:
    from ..job import Outcome

    workers = ctx.open_workers(job)
    spec = workers.spec
    if ctx.device not in spec.devices:
        return Outcome(Status.NOT_RUN, reason=f"spec {spec.name!r} runs only on {', '.join(spec.devices)}")
    return Speed(job, ctx, workers).run()


class Speed:
    def __init__(self, job: Job, ctx: Context, workers: Workers) -> None:
        from .equivalence import Equivalence

        self.job, self.ctx, self.workers, self.spec = job, ctx, workers, workers.spec
        self.eq = Equivalence(job, ctx, workers)
        o = job.options
        self.cases_n = max(1, int(o.get("cases") or CASES))
        self.rounds = max(6, int(o.get("rounds") or ROUNDS))
        self.repeats = max(1, int(o.get("repeats") or REPEATS))
        warmup, threshold = o.get("warmup"), o.get("threshold")
        self.warmup = max(0, int(warmup) if warmup is not None else WARMUP)
        self.threshold = float(threshold) if threshold is not None else 0.05
        self.confidence = float(o.get("confidence") or 0.95)
        self.fresh = bool(o.get("fresh_buffers", True))
        self.flush = bool(o.get("flush_l2", True))
        self.how: set[str] = set()
        self.clocks: list[float] = []
        self.flushed = 0
        self.shapes_skipped: list[str] = []  # production shapes that could not be timed here, and why
        self.output_bytes: dict[str, int] = {}  # per case id: the head's outputs' bytes
        self.flops: dict[str, int | str] = {}  # per case id: the reference's operations, or why none
        self.unchecked: list[str] = []  # what could not be checked, and why (said in the summary)

    # --- which cases ------------------------------------------------------------

    def cases(self) -> list[Case]:
        """The policy's production shapes first (``shapes``: each in every dtype the spec allows, up to
        8 GiB a case on a GPU), then the largest plain cases the schedule builds within the case
        budget, one per dtype first; ``cases`` of them in all, every production shape kept."""
        from ...protocol.cases import (PRODUCTION_CASE_BYTES, Case, ScheduleOptions, case_bytes, production_cases,
                                       schedule)
        from .equivalence import unsupported_dtypes

        if self.job.case:
            return [Case.from_token(self.job.case)]
        bad, _ = unsupported_dtypes(self.ctx, self.workers)
        opts = ScheduleOptions.from_options({**self.job.options, "cases": CANDIDATES}, seed=self.eq.seed,
                                            budget=self.eq.budget, unsupported=bad)
        roomy = max(self.eq.budget, PRODUCTION_CASE_BYTES) if self.ctx.device == "cuda" else self.eq.budget
        production, self.shapes_skipped = production_cases(self.spec, opts, roomy)
        plain = [c for c in schedule(self.spec, opts)
                 if all(i.layout == "contiguous" for i in c.inputs.values())
                 and case_bytes(self.spec, c.dims, c.inputs) <= self.eq.budget]
        plain.sort(key=lambda c: -case_bytes(self.spec, c.dims, c.inputs))
        chosen: list[Case] = []
        for c in plain:  # the largest of each dtype first, then the next largest
            if c.dtype not in {x.dtype for x in chosen}:
                chosen.append(c)
        chosen += [c for c in plain if c not in chosen]
        return production + chosen[:max(0, self.cases_n - len(production))]

    # --- the run ------------------------------------------------------------------

    def run(self) -> Outcome:
        from ...protocol.jobs import base_commit
        from ..equivalence.engine import ContextLost
        from ..job import Outcome
        from ..speed import compare
        from ..workers import BaseLost, WorkerDied

        base = self.eq.runner.base
        if base is None:
            why = ("the spec is new in this change: there is no base code to time against"
                   if not base_commit(self.job) else "the base's code could not be started for this spec")
            return Outcome(Status.PASSED, [self._note(f"not timed: {why}")], reason=why)
        per_case: list[tuple[Case, list[float], list[float]]] = []
        skipped: list[str] = []
        try:
            for case in self.cases():
                got = self._time_case(case, base)
                if isinstance(got, str):
                    skipped.append(f"case {case.id} ({case.describe()[:80]}): {got}")
                    continue
                per_case.append((case, *got))
        except BaseLost as exc:
            return self._not_timed(f"the base's code stopped answering: {exc}", skipped)
        except ContextLost as exc:
            if isinstance(exc, WorkerDied):
                raise
            return Outcome(Status.FAILED, [self._finding("cuda-error", f"the kernel broke the CUDA context while "
                                                                       f"timed: {exc}", Severity.ERROR)],
                           reason="CUDA context lost")
        if not per_case:
            return self._not_timed("no case could be timed", skipped)
        lines: list[str] = []
        for case, b, h in per_case:
            c = compare(b, h, confidence=self.confidence, threshold=self.threshold)
            flops = self.flops.get(case.id)
            rate = (f"; the reference's {flops / 1e9:.3g} GFLOP: head {flops / statistics.median(h) / 1e12:.3g} "
                    f"TFLOP/s" if isinstance(flops, int) and flops > 0 and statistics.median(h) > 0 else "")
            lines.append(f"case {case.id} ({case.describe()[:100]}; base {_ms(b)}, head {_ms(h)} per call{rate}): "
                         f"{c.describe()}")
        all_b = [t for _, b, _ in per_case for t in b]
        all_h = [t for _, _, h in per_case for t in h]
        overall = compare(all_b, all_h, confidence=self.confidence, threshold=self.threshold)
        implausible = self._implausible(per_case, overall)
        findings = [*implausible, *self._untimed_shapes(),
                    self._note(self._summary(overall, lines + self.unchecked, skipped), overall)]
        if any(f.severity == Severity.ERROR for f in implausible):
            return Outcome(Status.FAILED, findings, cases=len(per_case))
        if overall.beyond:
            findings.insert(0, self._finding(
                "slower", f"this change makes the kernel slower than the policy allows: {overall.describe()} "
                          f"(threshold {self.threshold:.0%})", Severity.ERROR, overall))
            return Outcome(Status.FAILED, findings, cases=len(per_case))
        return Outcome(Status.PASSED, findings, cases=len(per_case))

    def _time_case(self, case: Case, base: Candidate) -> tuple[list[float], list[float]] | str:
        """(the base's figures, the head's), one per round; or why the case could not be timed."""
        from ...protocol.inputs import materialize
        from ..replies import SpecBroken

        head = self.eq.runner.candidate
        m = materialize(self.spec, case, self.ctx.device)
        upstream = self.eq.runner.ref.upstream(case)
        for side, cand in (("head", head), ("base", base)):
            rep = cand.call(case, upstream, inputs=m, inputs_back=False)
            if rep.status != "ok":
                return f"the {side}'s code did not run it ({rep.status}: {(rep.message or '')[:160]})"
            if side == "head":
                self.output_bytes[case.id] = sum(int(t.numel()) * int(t.element_size()) for t in rep.outputs.values()
                                                 if hasattr(t, "element_size") and hasattr(t, "numel"))
        try:
            self.flops[case.id] = self.eq.runner.ref.flops(case)
        except SpecBroken as exc:  # the reference's word on its operations is missing: no compute floor
            self.flops[case.id] = str(exc)
        figures: dict[str, list[float]] = {"head": [], "base": []}
        for r in range(self.rounds):
            order = (("base", base), ("head", head)) if r % 2 == 0 else (("head", head), ("base", base))
            for side, cand in order:
                timed = cand.time(self.repeats, self.warmup if r == 0 else 0, fresh=self.fresh, flush=self.flush)
                if isinstance(timed, str):
                    return f"the {side}'s code could not be timed: {timed[:200]}"
                self.how.add(timed.how)
                self.flushed = max(self.flushed, timed.flushed_bytes)
                if timed.clock_mhz:
                    self.clocks.append(timed.clock_mhz)
                figures[side].append(statistics.median(timed.seconds))
        return figures["base"], figures["head"]

    def _implausible(self, per_case: list[tuple[Case, list[float], list[float]]],
                     overall: SpeedComparison) -> list[Finding]:
        """A head faster than the hardware allows (an error), or by more than ``IMPLAUSIBLE`` times (a warning)."""
        from .. import roofline

        found: list[Finding] = []
        gpu = self.ctx.device == "cuda"
        mem, why = roofline.memory_or_why() if gpu else (None, "")
        if why:
            self.unchecked.append(f"the hardware floor (outputs written once at peak bandwidth) was not checked: {why}")
        arith, why = roofline.compute_or_why() if gpu else (None, "")
        if why:
            self.unchecked.append(f"the hardware floor of the arithmetic (the reference's operations at peak rate) "
                                  f"was not checked: {why}")
        for case, _, h in per_case:
            out = self.output_bytes.get(case.id, 0)
            head = statistics.median(h)
            flops = self.flops.get(case.id)
            if isinstance(flops, str) and gpu:
                self.unchecked.append(f"case {case.id}: the reference's operations were not counted: {flops[:200]}")
            if arith is not None and isinstance(flops, int) and flops > 0:
                floor = roofline.compute_floor_s(flops, case.dtype, arith)
                if head < floor:
                    found.append(self._finding(
                        "implausible-speedup",
                        f"case {case.id} ({case.describe()[:100]}): the head's call took {_ms([head])}, less than "
                        f"a quarter of the {flops / 1e9:.3g} GFLOP the reference does on it take at this GPU's peak "
                        f"({floor * 1e3:.3g} ms; {arith.describe(case.dtype)}): the timed call did not do the work "
                        f"(products not computed, a result computed earlier or returned from a cache)",
                        Severity.ERROR))
                    break
            if mem is None or not out:
                continue
            floor = roofline.write_floor_s(out, mem)
            if floor > 0 and head < floor:
                found.append(self._finding(
                    "implausible-speedup",
                    f"case {case.id} ({case.describe()[:100]}): the head's call took {_ms([head])}, less than "
                    f"writing its {out / 2**20:.1f} MiB of outputs once takes at this GPU's peak memory bandwidth "
                    f"({floor * 1e3:.3g} ms; {mem.describe()}): the timed call did not do the work (a result "
                    f"computed earlier, or returned from a cache)", Severity.ERROR))
                break
        if overall.high < 1 / IMPLAUSIBLE:
            found.append(self._finding(
                "implausible-speedup",
                f"the head is {1 / overall.ratio:.1f}x faster than the base (interval {1 / overall.high:.1f}-"
                f"{1 / overall.low:.1f}x): beyond {IMPLAUSIBLE:.0f}x, a speed-up is more often work skipped than "
                f"work done faster; the other checks' verdicts stand, the timing deserves a look",
                Severity.WARNING, overall))
        return found

    # --- what is said -------------------------------------------------------------

    def _summary(self, overall: SpeedComparison, lines: list[str], skipped: list[str]) -> str:
        how = ", ".join(sorted(self.how)) or "?"
        setting = (f"{self.rounds} interleaved rounds per case, each side's figure the median of {self.repeats} "
                   f"timed runs ({how}"
                   + ("; the GPU's time of the call, queued behind a short GPU spin so that the host's queueing "
                      "is not timed" if "cuda-events" in self.how else "")
                   + (f"; fresh input buffers each run" if self.fresh else "")
                   + (f"; L2 flushed ({self.flushed >> 20} MiB overwritten) before each run" if self.flushed else "")
                   + (f"; SM clock {min(self.clocks):.0f}-{max(self.clocks):.0f} MHz" if self.clocks else "")
                   + ")")
        text = f"speed: {overall.describe()}; {setting}. " + " ".join(lines)
        skipped = skipped + self.shapes_skipped
        if skipped:
            text += " Not timed: " + "; ".join(skipped)
        return text

    def _untimed_shapes(self) -> list[Finding]:
        """A production shape the policy names for this spec that was too large to time here: said as
        a warning, not only in the note (the figures are then of smaller cases than the user asked for).
        A shape outside the spec's dims is only noted: a policy's shapes serve several specs."""
        from ...protocol.cases import OVER_BUDGET

        big = [s for s in self.shapes_skipped if s.endswith(OVER_BUDGET)]
        if not big:
            return []
        return [self._finding("shape-not-timed", "not timed, the figures are of smaller cases: " + "; ".join(big),
                              Severity.WARNING)]

    def _note(self, message: str, c: SpeedComparison | None = None) -> Finding:
        return self._finding("speed", message, Severity.NOTE, c)

    def _finding(self, kind: str, message: str, severity: Severity, c: SpeedComparison | None = None) -> Finding:
        assert self.job.spec is not None
        details: dict[str, object] = {}
        if c is not None:
            details = {"ratio": c.ratio, "low": c.low, "high": c.high, "pairs": c.pairs,
                       "confidence": c.confidence, "threshold": c.threshold}
        return Finding(check="speed", kind=kind, spec=self.job.spec.id, message=message, severity=severity,
                       details=details)

    def _not_timed(self, why: str, skipped: list[str]) -> Outcome:
        from ..job import Outcome

        said = why + (": " + "; ".join(skipped) if skipped else "")
        return Outcome(Status.NOT_RUN, [self._note(f"not timed: {said}")], reason=said[:300])


def _ms(seconds: list[float]) -> str:
    return f"{statistics.median(seconds) * 1e3:.3g} ms"
