"""Run one case, as the judge: the candidate in its worker, the truth in the reference worker,
the comparisons here. Returns findings; never prints.

The order matters. The candidate runs first and keeps its first outputs alive while it runs a
second time on the same inputs (both runs must agree, and must not hand back the same memory); a
sensitivity probe then refills the *same* input buffers with new values and runs it again. Every
output reaches this process as bytes (:mod:`gpu_gate.protocol.wire`), so what is compared is a plain tensor
the candidate never held.
"""
from __future__ import annotations

import contextlib
import dataclasses
import math
import time
from collections.abc import Callable, Iterator, Mapping
from typing import TYPE_CHECKING

from ...findings import Finding, Severity
from ..workers import (
    BaseLost,
    CallReport,
    Candidate,
    ContextLost,
    Reference,
    SpecBroken,
    TruthPending,
    output_dtypes,
)
from ...spec import Spec
from ...protocol.cases import Case
from .compare import (EPS, Comparison, Rule, agree, as_bytes, baseline_unusable, compare, run_spread,
                      storage_witness)
from ...protocol.guard import GUARD_BYTES, Guarded, canary_intact, geometry, guarded_from
from ...protocol.inputs import Materialized, materialize
from .noise import against_noise, replayed_against_noise
from .wording import less_accurate

if TYPE_CHECKING:
    import torch

    from ..reference import Recipe

__all__ = ["CaseResult", "CaseRunner", "ContextLost", "SpecBroken", "bitwise_equal"]

# Differential runs (the base's code on the same case): a change is "less accurate" when the head's
# error exceeds the policy's regression_factor times the base's, where errors below this many machine
# epsilons of the output dtype count as the same (rounding, not accuracy).
REGRESSION_FLOOR_EPS = 0.25


def rounding_units(c: Comparison) -> float:
    """Below how many machine epsilons of its dtype an output's normwise error is rounding, not
    accuracy: REGRESSION_FLOOR_EPS for an output of many elements, whose normwise error averages
    their roundings; more for a few elements, where one draw decides it: two correct float32 sums of
    the same values in different orders land a unit of rounding apart or so, and a scalar loss
    of one is exact by luck (measured on an H200: a KernelBench cross-entropy submission's scalar
    loss off by 1.05 epsilons, torch's own by 0.05, called 20x less accurate). The floor falls as
    1/sqrt(elements) from one epsilon (one element) to REGRESSION_FLOOR_EPS (16 elements and more)."""
    n = c.details.get("total")
    if not isinstance(n, int) or isinstance(n, bool) or n < 1:
        return REGRESSION_FLOOR_EPS
    return max(REGRESSION_FLOOR_EPS, min(1.0, 1.0 / math.sqrt(n)))
BASE_CALL_MIN_S = 30.0  # the base's code may take this long on one case, or BASE_CALL_FACTOR x the head's
BASE_CALL_FACTOR = 20.0
CONFIRM_RUNS = 5  # more runs of each side on a case where the head looks less accurate than the base
# Cases per output on which a failure already new (blocking) is also measured against the base's
# accuracy over CONFIRM_RUNS more runs of each side: that measure only words the finding (how much
# less accurate), so after a few cases it is left out; a failure that is not new is always measured
# (it may make it new).
WORDED_CASES = 3
BY_CHANCE = frozenset({"unstable", "unordered-stream", "address-dependent"})  # failures that show some runs only
BASE_RETRIES = 8  # more runs of the base's code before such a failure of the head's counts as new


@dataclasses.dataclass
class CaseResult:
    case: Case
    findings: list[Finding]
    comparisons: list[Comparison] = dataclasses.field(default_factory=list)
    refused: str | None = None
    unsupported: str | None = None  # the Triton interpreter could not run the kernel (not the kernel's refusal)
    trace: str | None = None  # the traceback that says where
    # Differential runs: the base's code on the same case. None: not compared (no base, or it refused).
    base_comparisons: list[Comparison] | None = None
    fixed: list[Finding] = dataclasses.field(default_factory=list)  # the base's failures the head no longer has
    # Where the head's code refused the case, in a differential run: the base's refusal of it too
    # (the repository's debt), or whether the base's code ran it and passed (None: not known)
    refused_at_base: str | None = None
    base_passed: bool | None = None
    # per output: how far apart this code's runs on the case landed (second run, relocated run)
    spreads: dict[str, float] = dataclasses.field(default_factory=dict)
    # the config each autotuned kernel ran for each key, on the first call (kernel -> {key: config})
    configs: dict[str, dict[str, str]] = dataclasses.field(default_factory=dict)

    @property
    def failed(self) -> bool:
        return any(f.severity is Severity.ERROR for f in self.findings)


def _finding(spec_id: str, case: Case, kind: str, message: str, repro: str, severity: Severity = Severity.ERROR,
             **details: object) -> Finding:
    return Finding(check="equivalence", kind=kind, message=message, severity=severity, spec=spec_id, case=case.id,
                   repro=repro, details={"case": case.describe(), "token": case.token(), **details})


# Wrong values in an output, whichever way they show (a NaN where the base has a wrong finite value is
# the same failure: the same uninitialised tail, say).
WRONG_VALUES = frozenset({"mismatch", "nan", "nonfinite", "constant-output"})
# Results that differ between runs on the same values: a second run, or the same values elsewhere.
VARIES = frozenset({"unstable", "address-dependent"})
CHANCE_KEYS = frozenset({"varies", "unordered-stream"})  # failure_key kinds of the BY_CHANCE failures


def failure_key(f: Finding) -> tuple[str, str]:
    """What a failure is about, across the head and the base: its kind (wrong values, whichever way
    they show) and the output (or input)."""
    kind = "wrong-values" if f.kind in WRONG_VALUES else "varies" if f.kind in VARIES else f.kind
    return kind, str(f.details.get("output", f.details.get("input", "")))


def chance_debt(findings: list[Finding], chance_at_base: set[tuple[str, str]]) -> list[Finding]:
    """A failure that shows by chance (two runs that differ, late work on another stream), new on
    its case, is the repository's debt when the base's code showed the same kind on the same output
    on another case of the job: whether it shows on a given case is luck, whether the code has it
    is not. Called once every case has run, so that the order of the cases does not matter."""
    out = []
    for f in findings:
        key = failure_key(f)
        if f.details.get("change") == "new" and f.kind in BY_CHANCE and key in chance_at_base:
            f = marked(f, "pre-existing", "the base's code shows the same on other cases of this job (it shows by "
                                          "chance, so not on every case)")
        out.append(f)
    return out


def within_spread(head: float, base: float, factor: float) -> bool:
    """A head whose runs on a case land ``head`` apart, where the base's own runs on the same inputs land
    ``base`` apart (more than 0: the base's results vary there too), varies as the base does unless
    it is more than ``factor`` times as far: the magnitude rule of accuracy, for run-to-run spread.
    Whether the spread crossed the band two runs may differ by is luck where the base's runs come
    near it (a random-order float16 sum): the size is what the change did."""
    return base > 0 and head <= factor * base


def _spread_into(spreads: dict[str, float], name: str, a: object, b: object) -> float | None:
    """Record how far apart two runs' values of output ``name`` are (see compare.run_spread)."""
    apart = run_spread(a, b)
    if apart is not None:
        spreads[name] = max(spreads.get(name, 0.0), apart)
    return apart


def marked(f: Finding, change: str, note: str | None = None) -> Finding:
    """``change``: new (the head fails, the base does not), pre-existing (both fail) or fixed."""
    details = {**f.details, "change": change}
    if note:
        details["base_note"] = note
    return dataclasses.replace(f, details=details)


@dataclasses.dataclass
class Truth:
    """The reference worker's answer on one case, computed once for the head's code and the base's."""

    reference: dict[str, object]
    baseline: dict[str, object]
    conditioning: dict[str, object]
    baseline32: dict[str, object] | None = None
    storage: dict[str, object] | None = None  # the envelope of intermediates stored in the data's dtype



@contextlib.contextmanager
def timed_into(seconds: dict[str, float], name: str) -> Iterator[None]:
    """Add the time the block takes to ``seconds[name]`` (timing reports only)."""
    start = time.monotonic()
    try:
        yield
    finally:
        seconds[name] = seconds.get(name, 0.0) + time.monotonic() - start


class CaseRunner:
    def __init__(self, spec: Spec, spec_id: str, device: str, rule: Rule, repro_cmd: str, candidate: Candidate,
                 reference: Reference, base: Candidate | None = None, regression_factor: float = 4.0) -> None:
        self.spec = spec
        self.spec_id = spec_id
        self.device = device
        self.rule = rule
        self.repro_cmd = repro_cmd  # with {token}
        self.candidate = candidate
        self.ref = reference
        self.base = base  # the base's code, in a differential run
        self.base_lost: str | None = None  # why the base stopped answering, from which case on
        self.base_refused: list[str] = []  # the cases the base's code refused, and why
        # the cases the base's code ran again on the head's autotune configs (see _on_the_heads_configs), and
        # those where its config lists lack some of them: (case, what was missing)
        self.on_head_configs: list[str] = []
        self.configs_missing: list[tuple[str, str]] = []
        self.autotuned: set[str] = set()  # the head's autotuned kernels that had a choice of configs, as it says
        # failures that show by chance (BY_CHANCE) the base's code showed, on any case of the job, by
        # failure_key: a property of the code, not of the case it happened to show on
        self.chance_at_base: set[tuple[str, str]] = set()
        self.regression_factor = regression_factor
        self.worded: dict[str, int] = {}  # per output: cases whose new failure was measured against the base
        self.noise_stood: dict[str, int] = {}  # per output: cases whose new failure stood the noise sampling
        self.inputs_s = 0.0  # time spent building the cases' inputs (the judge's own work)
        # where a case's time goes, in the judge (timing only): each step's seconds, summed over cases
        self.steps: dict[str, float] = {}
        self._in_base = False  # within the base's step (see _step)
        # the output dtypes the head's code returned, by the dtypes of the case's inputs: the next
        # such case's truth is asked for with them before the head's code runs (see run)
        self.dtypes_seen: dict[tuple[tuple[str, str], ...], dict[str, str]] = {}

    def _step(self, name: str) -> contextlib.AbstractContextManager[None]:
        """Time a step of the case into ``steps``; inside the base's step, the steps of the base's own
        run (its calls, guards, comparisons) count in ``base`` alone, not again as the head's."""
        if self._in_base:
            return contextlib.nullcontext()
        if name == "base":
            return self._base_step()
        return timed_into(self.steps, name)

    @contextlib.contextmanager
    def _base_step(self) -> Iterator[None]:
        self._in_base = True
        try:
            with timed_into(self.steps, "base"):
                yield
        finally:
            self._in_base = False

    def run(self, case: Case, *, sensitivity: bool) -> CaseResult:
        repro = self.repro_cmd.format(token=case.token())
        start = time.monotonic()
        m = materialize(self.spec, case, self.device)
        self.inputs_s += time.monotonic() - start
        with self._step("upstream"):
            upstream = self.ref.upstream(case)
        # The truth is asked for now, where the head's code returned outputs of known dtypes on a
        # case with inputs of these dtypes: the reference worker computes it while the head's
        # code runs. Where the outputs' dtypes turn out otherwise, it is asked for again.
        seen = self.dtypes_seen.get(_input_dtypes(case))
        early = self.ref.truth_for(case, seen) if seen is not None else None
        # In a differential run the base's code starts on the same inputs first, and runs beside the
        # head's (another process): its first call is needed whatever the head's verdict.
        base_first = self._base_later(case, m, upstream)
        start = time.monotonic()
        try:
            result, truth = self._run(self.candidate, case, m, upstream, repro, sensitivity, early=early)
        finally:
            self.candidate.release()
        self.autotuned.update(result.configs)
        if early is not None and not early.taken:
            with self._step("truth"):
                early()  # not needed (the head's code did not run): read, so that the next answer is the next
        if base_first is not None:
            assert self.base is not None
            self.base.limit_s = max(BASE_CALL_MIN_S, BASE_CALL_FACTOR * (time.monotonic() - start))  # type: ignore[attr-defined]
            with self._step("base"):
                if result.refused is None and result.unsupported is None:
                    self._against_base(case, m, upstream, repro, sensitivity, result, truth, base_first)
                elif result.refused is not None:
                    self._refused_against_base(case, m, upstream, repro, result, base_first)
                else:
                    self._base_wait(base_first, case)
        return result

    def _refused_against_base(self, case: Case, m: Materialized, upstream: Recipe | None, repro: str,
                              result: CaseResult, first: Callable[[], CallReport]) -> None:
        """The head's code refused the case (it raised): what did the base's code do with it? It
        refused it too: the refusal is the repository's debt (``refused_at_base``), as a kernel that
        no longer compiles with this Triton at either commit. It ran it: ``base_passed`` says
        whether it got it right (against the truth, computed for that), so that a change that makes
        the kernel refuse an input it handled is told from one that refuses an input it got wrong.
        Anything else (the base ran out of memory, could not run it here): not known."""
        rep = self._base_wait(first, case)
        if rep is None or self.base is None:
            return
        if rep.status == "refused":
            result.refused_at_base = rep.message or "it raised"
            return
        if rep.status != "ok":
            return
        try:
            bres, _ = self._run(self.base, case, m, upstream, repro, False, None, light=True, first=rep)
        except (BaseLost, ContextLost) as exc:
            self.base, self.base_lost = None, f"{exc} (case {case.id})"
            return
        result.base_passed = not bres.failed

    def _base_later(self, case: Case, m: Materialized, upstream: Recipe | None) -> Callable[[], CallReport] | None:
        """The base's first call on the case, sent now; None without a base (or once it is lost)."""
        if self.base is None:
            return None
        try:
            return self.base.call_later(case, upstream, inputs=m)
        except (BaseLost, ContextLost) as exc:
            self.base, self.base_lost = None, f"{exc} (case {case.id})"
            return None

    def _base_wait(self, first: Callable[[], CallReport], case: Case) -> CallReport | None:
        """The base's answer to the call ``_base_later`` sent (None: the base is lost, and dropped)."""
        assert self.base is not None
        try:
            try:
                return first()
            finally:
                self.base.release()
        except (BaseLost, ContextLost) as exc:
            self.base, self.base_lost = None, f"{exc} (case {case.id})"
            return None

    def _run(self, cand: Candidate, case: Case, m: Materialized, upstream: Recipe | None, repro: str,
             sensitivity: bool, truth: Truth | None = None, light: bool = False, first: CallReport | None = None,
             early: TruthPending | None = None) -> tuple[CaseResult, Truth | None]:
        """One code's run of the case: ``cand`` is the head's code, or the base's with the head's
        ``truth``. ``light``: the first call and the comparisons only (the base, where the head
        passed), its report ``first`` where that call was made already. ``early``: the truth,
        asked for before the call, for the output dtypes expected."""
        import torch

        spreads: dict[str, float] = {}
        with self._step("first_call"):
            rep1 = first or cand.call(case, upstream, inputs=m, hold=not light, early=not light)
        if rep1.status != "ok":
            return self._not_ok(case, rep1, repro), truth
        with self._step("guards"):
            findings = [] if light else self._unordered(case, rep1, repro)
            findings += self._guards(case, m, rep1, repro)
            findings += self._types(case, rep1, repro)
        snap1 = rep1.outputs
        # The reference worker computes the truth while the candidate's worker runs the second time
        # (or, asked early, ran the first).
        pending: TruthPending | None = None
        if truth is None:
            dtypes = output_dtypes(snap1)
            if not light:
                self.dtypes_seen[_input_dtypes(case)] = dtypes
            if early is not None and early.dtypes == dtypes:
                pending = early
            else:
                if early is not None:
                    with self._step("truth"):
                        early()  # asked for other dtypes: read, and asked again
                pending = self.ref.truth_for(case, dtypes)
        with self._step("second_call"):
            outs2 = None if light else self._second_run(cand, case, upstream, repro, findings, rep1)
        if pending is not None:
            with self._step("truth"):
                truth = Truth(*pending())
        assert truth is not None
        with self._step("compare"):
            ref, base, cond = truth.reference, truth.baseline, truth.conditioning
            comparisons = []
            for k, r in ref.items():
                if k not in snap1:
                    findings.append(self._missing(case, k, snap1, repro))
                    continue
                comp = self._compare(case, k, snap1, truth)
                comparisons.append(comp)
                if not comp.ok:
                    findings.append(_finding(self.spec_id, case, comp.kind, comp.message, repro, output=k,
                                             **comp.details))
                if outs2 is not None and comp.kind not in ("shape", "type") and isinstance(r, torch.Tensor):
                    why = agree(k, snap1[k], outs2.get(k), bitwise=self.spec.deterministic, ref=r, base=base.get(k),
                                rule=self.rule, perturbed=cond.get(k))
                    apart = _spread_into(spreads, k, snap1[k], outs2.get(k))
                    if why:
                        findings.append(_finding(self.spec_id, case, "unstable", why, repro, output=k, spread=apart))
        if sensitivity and not findings:
            with self._step("relocated"):
                findings += self._relocated(cand, case, upstream, snap1, ref, base, cond, repro, spreads)
        if sensitivity and not findings:
            with self._step("sensitivity"):
                findings += self._sensitivity(cand, case, snap1, repro)
        return CaseResult(case, findings, comparisons, spreads=spreads, configs=rep1.configs), truth

    def _compare(self, case: Case, k: str, outs: dict[str, object], truth: Truth) -> Comparison:
        r = truth.reference[k]
        cond = truth.conditioning.get(k)
        comp = compare(k, outs[k], r, truth.baseline.get(k), self.rule, perturbed=cond)
        if baseline_unusable(comp):
            if truth.baseline32 is None:
                truth.baseline32, truth.storage = self.ref.baseline_fp32(case, outs)
            torch_error = comp.details["torch_error"]
            # torch's own low-precision result is far from the truth: an overflow inside it (x**2 in
            # float16), or terms that cancel (a gradient whose true value is 0), where every
            # low-precision computation lands far from the truth *relative to the result*. Torch in
            # float32 is then the yardstick, or, if larger, the rounding of a kernel that stores its
            # intermediates in the output's dtype: it scales with the terms, not the result, and does
            # not overflow.
            stored = truth.storage.get(k) if truth.storage is not None else None
            if stored is not None:  # torch's own low-precision result, where it is a witness of the storage
                stored = storage_witness(r, truth.baseline.get(k), stored)
            comp = compare(k, outs[k], r, truth.baseline32.get(k), self.rule,
                           perturbed=stored if stored is not None else cond)
            comp.details.update({"baseline": "float32", "torch_error": torch_error,
                                 "envelope": "storage" if stored is not None else "arithmetic"})
            if not comp.ok:
                also = (f", or the rounding of intermediates stored in {comp.details.get('dtype')} if larger"
                        if stored is not None else "")
                comp.message += (f"\n(torch's own {comp.details.get('dtype')} result is off by {torch_error:.3g}, "
                                 f"so the baseline is torch in float32, rounded to the output dtype{also})")
        return comp

    # --- differential runs: the base's code on the same case ------------------------------

    def _against_base(self, case: Case, m: Materialized, upstream: Recipe | None, repro: str, sensitivity: bool,
                      result: CaseResult, truth: Truth | None, first: Callable[[], CallReport]) -> None:
        """Run the base's code on the same inputs, against the same truth, and classify the head's
        failures: pre-existing where the base fails the same way, new otherwise; failures of the
        base the head no longer has are ``result.fixed``. A head that passes has the base run once
        (the comparisons); a head that fails has it run the same probes, so that a probe's finding
        is classified like any other. A base that dies or hangs is dropped: the rest of the job is
        judged by absolute rules, never more leniently. Where the two ran different autotune configs,
        the base's code is judged on the head's (see _on_the_heads_configs)."""
        base = self.base
        assert base is not None
        try:
            self._against_base_on(base, case, m, upstream, repro, sensitivity, result, truth, first)
        finally:
            base.autotune = {}  # its own configs again, for the next case

    def _on_the_heads_configs(self, base: Candidate, case: Case, m: Materialized, upstream: Recipe | None,
                              repro: str, sensitivity: bool, truth: Truth | None, light: bool, result: CaseResult,
                              bres: CaseResult) -> CaseResult:
        """The base's run of the case to compare with: where the head's autotuned kernels ran other
        configs than the base's did on some keys (a pull request that drops or adds a config shifts
        every later turn; timing on a GPU picks by noise), the base's code runs the case again on the
        head's configs, and that run, and every later run of the base on this case, is the one
        compared: a failure that only one config shows is then new only if the base's code does not
        show it on that config too. The head's worker names the configs; only configs the base's own
        lists have are run (matched by their settings), so what the base shows is its own code's doing.
        Where its lists lack one, its run on its own configs stands, and the job says so."""
        asked = {k: {key: c for key, c in keys.items() if bres.configs.get(k, {}).get(key) != c}
                 for k, keys in result.configs.items()}
        asked = {k: keys for k, keys in asked.items() if keys}
        if not asked:
            return bres
        base.autotune = asked  # until the case ends (see _against_base)
        try:
            again, _ = self._run(base, case, m, upstream, repro, sensitivity and not light, truth, light=light)
        finally:
            base.release()
        lacking = [f"{k} {c}" for k, keys in asked.items() for key, c in keys.items()
                   if again.configs.get(k, {}).get(key) != c]
        if lacking or again.refused is not None or again.unsupported is not None:
            base.autotune = {}
            self.configs_missing.append((case.id, lacking[0] if lacking else
                                         f"it refused the case on them: {again.refused or again.unsupported}"))
            return bres
        self.on_head_configs.append(case.id)
        return again

    def _against_base_on(self, base: Candidate, case: Case, m: Materialized, upstream: Recipe | None, repro: str,
                         sensitivity: bool, result: CaseResult, truth: Truth | None,
                         first: Callable[[], CallReport]) -> None:
        light = not result.failed
        rep1 = self._base_wait(first, case)  # the first call, made beside the head's
        if rep1 is None:
            return
        try:
            if light:  # the comparisons only: no more calls (the first one's outputs are released already)
                bres, _ = self._run(base, case, m, upstream, repro, False, truth, light=True, first=rep1)
            else:
                try:
                    # where the head failed, the base runs the same probes: the first call again, with them
                    bres, _ = self._run(base, case, m, upstream, repro, sensitivity, truth)
                finally:
                    base.release()
        except (BaseLost, ContextLost) as exc:
            self.base, self.base_lost = None, f"{exc} (case {case.id})"
            return
        if result.configs and bres.refused is None and bres.unsupported is None:
            try:
                bres = self._on_the_heads_configs(base, case, m, upstream, repro, sensitivity, truth, light, result,
                                                  bres)
            except (BaseLost, ContextLost) as exc:
                self.base, self.base_lost = None, f"{exc} (case {case.id})"
                return
        if bres.refused is not None or bres.unsupported is not None:
            why = "the base's code refused this case" if bres.refused else "the base's code could not run this case"
            self.base_refused.append(f"{case.id}: {bres.refused or bres.unsupported}")
            result.findings = [marked(f, "new", why) if f.severity is Severity.ERROR else f for f in result.findings]
            return
        result.base_comparisons = bres.comparisons
        failing = [f for f in bres.findings if f.severity is Severity.ERROR]
        at_base = {failure_key(f) for f in failing}
        # A failure that shows only some of the time (two runs that differ, work finished late on
        # another stream) is looked for at the base more than once before it counts as new.
        # An output the base's code already gets wrong on this case: that the head's wrong result
        # also varies from run to run (two overlapping writes that now disagree, say) is that same
        # defect showing another way, not this change's.
        wrong_at_base = {out for kind, out in at_base if kind == "wrong-values"}

        # how far apart the base's own runs on the same inputs landed, per output, over its runs here
        base_spread = dict(bres.spreads)

        def old_debt(f: Finding) -> bool:
            kind, out = failure_key(f)
            return (kind, out) in at_base or (kind == "varies" and out in wrong_at_base) \
                or (kind == "varies" and self._within_base_spread(f, base_spread.get(out)))

        def still_wanted() -> set[tuple[str, str]]:
            return {failure_key(f) for f in result.findings
                    if f.severity is Severity.ERROR and f.kind in BY_CHANCE and not old_debt(f)}

        wanted = still_wanted()
        for _ in range(BASE_RETRIES if wanted else 0):
            try:
                try:
                    again, _ = self._run(base, case, m, upstream, repro, sensitivity, truth)
                finally:
                    base.release()
            except (BaseLost, ContextLost) as exc:
                self.base, self.base_lost = None, f"{exc} (case {case.id})"
                break
            found = {failure_key(f) for f in again.findings if f.severity is Severity.ERROR}
            # wrong on this run of the same inputs, where its first run passed: the base's results on
            # this output vary from run to run beyond the band two runs may differ by, which is what
            # the head's varying output shows (a random-order float16 sum that lands outside the
            # tolerance on some runs: the head's relocated run did, the base's retries did so too)
            found |= {("varies", out) for kind, out in found if kind == "wrong-values"}
            at_base |= found & wanted
            for out, apart in again.spreads.items():
                base_spread[out] = max(base_spread.get(out, 0.0), apart)
            wanted = still_wanted()
            if not wanted:
                break
        self.chance_at_base |= {key for key in at_base if key[0] in CHANCE_KEYS}
        findings = [(marked(f, "pre-existing" if old_debt(f) else "new", self._spread_note(f, base_spread))
                     if f.severity is Severity.ERROR else f) for f in result.findings]
        if truth is not None:  # one draw of a nondeterministic base is not its accuracy
            findings = against_noise(self, case, m, upstream, truth, findings,
                                     {c.name: c.error for c in result.comparisons},
                                     {c.name: c.error for c in bres.comparisons})
        findings = self._regressions(case, repro, result.comparisons, bres.comparisons, findings,
                                     lambda names: self._confirm(case, m, upstream, truth, names))
        result.findings = findings
        at_head = {failure_key(f) for f in findings if f.severity is Severity.ERROR}
        # what shows only some of the time is not called fixed on one quiet run of the head
        result.fixed = [marked(f, "fixed") for f in failing if failure_key(f) not in at_head and f.kind not in BY_CHANCE]

    def _within_base_spread(self, f: Finding, base: float | None) -> bool:
        """Whether the head's runs on the case land no further apart than ``regression_factor`` times the
        base's own runs on the same inputs (see :func:`within_spread`)."""
        head = f.details.get("spread")
        return (not self.spec.deterministic and isinstance(head, (int, float)) and base is not None
                and within_spread(float(head), base, self.regression_factor))

    def _spread_note(self, f: Finding, base_spread: Mapping[str, float]) -> str | None:
        """Why a varying output is the base's debt, where its size says so (None elsewhere)."""
        kind, out = failure_key(f)
        base = base_spread.get(out)
        if kind != "varies" or base is None or not self._within_base_spread(f, base):
            return None
        return (f"the base's code's runs on the same inputs land up to {base:.3g} apart on output {out!r}, this "
                f"change's {float(f.details['spread']):.3g}: within {self.regression_factor:g}x (regression_factor), "
                f"the same nondeterminism")

    def _regressions(self, case: Case, repro: str, head: list[Comparison], base: list[Comparison],
                     findings: list[Finding],
                     confirm: Callable[[list[str]], dict[str, tuple[list[float], list[float]]]]) -> list[Finding]:
        """The head's error more than ``regression_factor`` x the base's on the same case and output:
        blocking, whether or not both pass the absolute rule (a bf16 accumulation that stays inside
        the tolerance on the cases run, a failure that was there but is now far worse). One run of
        each is a sample: a suspected regression is run again on both sides (``confirm``), and
        stands only if the head's best run is still that much worse than the base's worst, and
        neither side's results changed between runs (a nondeterministic kernel's accuracy varies
        from run to run: the absolute rule judges it)."""
        at_base = {c.name: c for c in base}
        suspects: dict[str, tuple[Comparison, Comparison]] = {}
        for hc in head:
            bc = at_base.get(hc.name)
            if bc is None or hc.kind not in ("ok", "mismatch") or bc.kind not in ("ok", "mismatch"):
                continue
            if hc.error > self.regression_factor * max(bc.error, self._floor(hc)):
                suspects[hc.name] = (hc, bc)
        for name in [n for n in suspects if self._new_failure(findings, n)]:
            if self.worded.get(name, 0) >= WORDED_CASES:
                del suspects[name]  # new already, and worded on earlier cases: more runs change nothing
            else:
                self.worded[name] = self.worded.get(name, 0) + 1
        if not suspects:
            return findings
        confirmed = confirm(sorted(suspects))
        out = list(findings)
        for name, (hc, bc) in suspects.items():
            errors = confirmed.get(name)
            if errors is None:
                continue  # the results changed between runs, or a rerun failed: not a regression by this rule
            head_err, base_err = min(hc.error, *errors[0]), max(bc.error, *errors[1])
            if head_err <= self.regression_factor * max(base_err, self._floor(hc)):
                continue
            what = less_accurate(name, head_err, base_err, 1 + len(errors[0]), self.regression_factor)
            if hc.ok:
                out.append(marked(_finding(self.spec_id, case, "less-accurate", what, repro, output=name,
                                           error=head_err, base_error=base_err,
                                           dtype=str(hc.details.get("dtype") or "float32")), "new"))
                continue
            # the head already fails here; if the base fails too, it fails far less: this change's doing
            out = [marked(dataclasses.replace(f, message=f"{f.message}\n({what})",
                                              details={**f.details, "base_fails_less": f.details.get("change")
                                                       == "pre-existing"}), "new")
                   if f.details.get("output") == name and f.kind == "mismatch" else f for f in out]
        return out

    @staticmethod
    def _new_failure(findings: list[Finding], output: str) -> bool:
        """Whether ``output`` already fails this case with a new blocking mismatch."""
        return any(f.kind == "mismatch" and f.severity is Severity.ERROR and f.details.get("output") == output
                   and f.details.get("change") == "new" for f in findings)

    @staticmethod
    def _floor(c: Comparison) -> float:
        """Below this error no change counts as less accurate: a few ulps of the output's dtype; and
        where the yardstick is the rounding of intermediates stored in that dtype (terms that cancel),
        that rounding: two kernels' noise on a result the terms dwarf is not a regression."""
        floor = rounding_units(c) * EPS.get(str(c.details.get("dtype") or "float32"), EPS["float32"])
        if c.details.get("envelope") == "storage":
            floor = max(floor, c.baseline_error)
        return floor

    def _confirm(self, case: Case, m: Materialized, upstream: Recipe | None, truth: Truth | None,
                 names: list[str]) -> dict[str, tuple[list[float], list[float]]]:
        """Run the head's and the base's code CONFIRM_RUNS more times each on the case: per output,
        (the head's errors, the base's errors), left out where a side's results changed between runs."""
        assert truth is not None
        runs: dict[str, list[list[float]]] = {k: [[], []] for k in names}
        firsts: dict[str, list[object]] = {k: [None, None] for k in names}
        unstable: set[str] = set()
        for side, cand in enumerate((self.candidate, self.base)):
            if cand is None:
                return {}
            for _ in range(CONFIRM_RUNS):
                try:
                    try:
                        rep = cand.call(case, upstream, inputs=m)
                    finally:
                        cand.release()
                except (BaseLost, ContextLost) as exc:
                    if cand is self.candidate:
                        raise
                    self.base, self.base_lost = None, f"{exc} (case {case.id})"
                    return {}
                if rep.status != "ok":
                    return {}
                for k in names:
                    out = rep.outputs.get(k)
                    if k not in truth.reference or out is None:
                        unstable.add(k)
                        continue
                    if firsts[k][side] is None:
                        firsts[k][side] = out
                    elif not bitwise_equal(firsts[k][side], out):
                        unstable.add(k)
                    runs[k][side].append(self._compare(case, k, rep.outputs, truth).error)
        return {k: (v[0], v[1]) for k, v in runs.items() if k not in unstable}

    # --- the replay: a passed case again, late, in plain buffers ---------------------------

    def replay(self, case: Case) -> list[Finding]:
        """Run a case the candidate passed again, after the rest of the job, with the same values
        in plain tensors of their own: contiguous where the spec allows it, no guard band, no
        storage offset, the storage exactly as large as the tensor (as a real caller's are). A
        kernel that behaves only inside the gate's buffers or early in a run (it looks for the
        guard bands, counts its calls, keys a cache on a layout) gives other results here. In a
        differential run, the base's code is replayed the same way before a failure counts as new."""
        found = self._replay_on(self.candidate, case)
        if found and self.base is not None:
            try:
                at_base = {failure_key(f) for f in self._replay_on(self.base, case)}
            except (BaseLost, ContextLost) as exc:
                self.base, self.base_lost = None, f"{exc} (replay of case {case.id})"
                return found
            found = [marked(f, "pre-existing" if failure_key(f) in at_base else "new") for f in found]
            found = replayed_against_noise(self, case, found)
        return found

    def plain_layouts(self) -> dict[str, str]:
        """How a replay lays out each input: contiguous where the spec allows it, else as the case has it."""
        return {k: ("contiguous" if "contiguous" in (getattr(inp, "layouts", None) or ("contiguous",)) else "same")
                for k, inp in self.spec.inputs.items()}

    def _replay_on(self, cand: Candidate, case: Case) -> list[Finding]:
        repro = self.repro_cmd.format(token=case.token())
        layouts = self.plain_layouts()
        m = materialize(self.spec, case, self.device)
        upstream = self.ref.upstream(case)
        try:
            rep = cand.call(case, upstream, inputs=m, plain=layouts)
        finally:
            cand.release()
        where = ("given the same inputs again later in the run, in plain tensors (contiguous, no guard band, "
                 "storage of their own)")
        if rep.status != "ok":
            return [_finding(self.spec_id, case, "replay-differs",
                             f"the candidate passed case {case.id}, but failed when {where}: {rep.message}", repro)]
        truth = Truth(*self.ref.truth_later(case, rep.outputs)())
        found = self._types(case, rep, repro)
        for k in truth.reference:
            if k not in rep.outputs:
                found.append(_finding(self.spec_id, case, "replay-differs",
                                      f"the candidate passed case {case.id}, but returned no output {k!r} when "
                                      f"{where}", repro, output=k))
                continue
            comp = self._compare(case, k, rep.outputs, truth)
            if not comp.ok:
                found.append(_finding(
                    self.spec_id, case, "replay-differs",
                    f"output {k!r} passed case {case.id}, but is wrong when {where}: the kernel behaves differently "
                    f"outside the gate's usual buffers or call order (it may look for the guard bands, count its "
                    f"calls, or key a cache on the layout)\n{comp.message}", repro, output=k, **comp.details))
        return found

    def _not_ok(self, case: Case, rep: CallReport, repro: str) -> CaseResult:
        if rep.status == "oom":
            return CaseResult(case, [_finding(self.spec_id, case, "out-of-memory",
                                              f"the candidate ran out of GPU memory on case {case.id}: {rep.message}",
                                              repro)])
        if rep.status == "unsupported":
            return CaseResult(case, [], unsupported=rep.message, trace=rep.trace)
        return CaseResult(case, [], refused=rep.message, trace=rep.trace)

    def _second_run(self, cand: Candidate, case: Case, upstream: Recipe | None, repro: str,
                    findings: list[Finding], rep1: CallReport) -> dict[str, object] | None:
        # The first run may have compiled its kernels after queueing them, outrunning the
        # side-stream delay; the second run is warm, so it is checked again where the first
        # switched streams. Outputs bitwise equal to the first run's stay in the worker.
        rep2 = cand.call(case, upstream, early=rep1.side_streams > 0, compare_held=True)
        if rep2.status != "ok":
            findings.append(_finding(self.spec_id, case, "unstable",
                                     f"the second run on the same inputs raised {rep2.message}", repro))
            return None
        outs2 = {k: (rep1.outputs.get(k) if k in rep2.same_as_held else rep2.outputs.get(k))
                 for k in {*rep2.outputs, *rep2.same_as_held}}
        if not any(f.kind == "unordered-stream" for f in findings):
            findings += self._unordered(case, rep2, repro, outs2)
        findings += self._reused(case, rep2, repro)
        return outs2

    def _unordered(self, case: Case, rep: CallReport, repro: str, final: dict[str, object] | None = None
                   ) -> list[Finding]:
        """The copy the worker took on the caller's stream as the call returned, against the
        output once the whole device was idle: work finished later on a stream the caller's
        stream never waited for."""
        if self.device != "cuda":
            return []  # no streams on the CPU: nothing can finish after the call returned
        return [_finding(self.spec_id, case, "unordered-stream",
                         f"output {k!r} changed after the caller's stream had finished: the kernel completes its work "
                         f"on another stream without ordering it with the caller's stream (make the caller's stream "
                         f"wait, e.g. torch.cuda.current_stream().wait_stream(side))", repro, output=k)
                for k, e in rep.early.items() if not bitwise_equal(e, (final or rep.outputs).get(k))]

    def _missing(self, case: Case, k: str, got: Mapping[str, object], repro: str) -> Finding:
        if k.startswith("grad:"):
            msg = (f"the candidate produced no gradient for {k[5:]!r}: its outputs are not differentiable "
                   f"with respect to it (grads={list(self.spec.grads)}; wrap the kernel in a "
                   f"torch.autograd.Function with a backward)")
        else:
            msg = f"the candidate returned no output {k!r} (it returned {sorted(got)})"
        return _finding(self.spec_id, case, "missing-output", msg, repro, output=k)

    def _reused(self, case: Case, rep2: CallReport, repro: str) -> list[Finding]:
        """Two calls returned the same storage while the first result was still alive: a cached
        tensor, or a static buffer that the next call silently overwrites. (A view of an input
        is reported as such, not here.)"""
        inputs = {span[0] - GUARD_BYTES for span in rep2.input_spans.values()}
        found = []
        for k, (_, storage) in rep2.where.items():
            before = rep2.held_where.get(k)
            if storage and before is not None and before[1] == storage and storage not in inputs:
                found.append(_finding(
                    self.spec_id, case, "cached-output",
                    f"output {k!r}: two calls returned the same memory while the first result was still in use "
                    f"(a cached tensor from an earlier call, or a static buffer that each call overwrites)",
                    repro, output=k))
        return found

    def _types(self, case: Case, rep: CallReport, repro: str) -> list[Finding]:
        """Outputs that are not plain tensors: compared by their bytes, and reported, since a
        subclass can change what arithmetic on it means."""
        return [_finding(self.spec_id, case, "output-type",
                         f"output {k!r} is a {t}, not a torch.Tensor: a kernel returns plain tensors (gpu-gate compares "
                         f"its bytes; a subclass can redefine what comparing it means)", repro, output=k)
                for k, t in rep.types.items()]

    def _guards(self, case: Case, m: Materialized, rep: CallReport, repro: str) -> list[Finding]:
        found = []
        sid = self.spec_id
        for name, buf in rep.inputs_changed.items():
            raw = buf.cpu()
            g = m.guarded.get(name)
            if g is None or raw.numel() != g.buffer.numel():
                found.append(_finding(sid, case, "worker-protocol", f"the worker sent back a buffer for input {name!r} "
                                                                    f"that is not the one it was given", repro))
                continue
            # the padding to 256 bytes after the storage counts as guard too
            intact = canary_intact(_bytes(raw[:GUARD_BYTES]), _bytes(raw[GUARD_BYTES + g.nbytes:]))
            if not intact:
                found.append(_finding(sid, case, "out-of-bounds-write",
                                      f"the candidate wrote past the bounds of input {name!r} "
                                      f"(the guard band around it changed)", repro, input=name))
            elif name in self.spec.mutates:
                found += self._declared_write(case, name, raw, g, rep, repro)
            else:
                found.append(_finding(sid, case, "input-modified",
                                      f"the candidate modified its input {name!r} (inputs must be unchanged "
                                      f"after the call; a kernel that writes it in place on purpose declares it: "
                                      f"gg.spec(mutates={{{name!r}: 'the output it holds'}}))", repro, input=name))
        for shape, head, tail in rep.watch:
            if not canary_intact(head, tail):
                found.append(_finding(sid, case, "out-of-bounds-write",
                                      f"the candidate wrote past the end of an output buffer from gg.empty "
                                      f"({tuple(shape)})", repro))
        for k, (ptr, _) in rep.where.items():
            inside = [n for n, (lo, hi) in rep.input_spans.items() if ptr and lo <= ptr < hi]
            if inside and not all(self.spec.mutates.get(n) == k for n in inside):
                found.append(_finding(sid, case, "output-aliases-input",
                                      f"output {k!r} is a view of an input: the kernel returned its input "
                                      f"instead of computing a result", repro, output=k))
        return found

    def _declared_write(self, case: Case, name: str, raw: torch.Tensor, g: Guarded, rep: CallReport,
                        repro: str) -> list[Finding]:
        """An input the spec says the kernel writes in place (``mutates=``): after the call it must
        hold exactly the declared output, whose values the comparison judges like any other."""
        import torch

        target = self.spec.mutates[name]
        out = rep.outputs.get(target)
        held = guarded_from(name, raw, geometry(g)).view
        if not isinstance(out, torch.Tensor):
            why = f"the candidate returned no output {target!r}"
        elif tuple(out.shape) != tuple(held.shape) or out.dtype != held.dtype:
            why = f"output {target!r} is {tuple(out.shape)} {out.dtype}, the input {tuple(held.shape)} {held.dtype}"
        elif not bitwise_equal(held.detach().cpu(), out.detach().cpu()):
            why = f"it does not hold output {target!r}"
        else:
            return []
        return [_finding(self.spec_id, case, "input-modified",
                         f"the candidate wrote into its input {name!r}, which the spec allows only to hold output "
                         f"{target!r} afterwards (mutates=), but {why}", repro, input=name)]

    def _relocated(self, cand: Candidate, case: Case, upstream: Recipe | None, out1: dict[str, object],
                   ref: Mapping[str, object], base: Mapping[str, object], cond: Mapping[str, object],
                   repro: str, spreads: dict[str, float]) -> list[Finding]:
        """The same values at other addresses, the old buffers filled with garbage: a kernel whose
        output changes reads memory it was not handed this call (the stale addresses of a CUDA graph
        captured on an earlier call, a pointer cached from one)."""
        import torch

        rep = cand.call(case, upstream, relocate=True)
        if rep.status != "ok":
            return [_finding(self.spec_id, case, "address-dependent",
                             f"the candidate failed when given the same inputs at other addresses: {rep.message}", repro)]
        found = []
        for k, r in ref.items():
            a, b = out1.get(k), rep.outputs.get(k)
            if not isinstance(a, torch.Tensor) or not isinstance(r, torch.Tensor):
                continue
            why = agree(k, a, b, bitwise=self.spec.deterministic, ref=r, base=base.get(k), rule=self.rule,
                        perturbed=cond.get(k))
            apart = _spread_into(spreads, k, a, b)
            if why:
                found.append(_finding(self.spec_id, case, "address-dependent",
                                      f"output {k!r} changed when the same inputs were given at other addresses (the "
                                      f"old ones overwritten): the kernel reads memory it was not handed in this call, "
                                      f"e.g. the stale addresses of a CUDA graph captured earlier ({why})", repro,
                                      output=k, spread=apart))
        return found

    def _sensitivity(self, cand: Candidate, case: Case, out1: dict[str, object], repro: str) -> list[Finding]:
        """New values for the same case, written into the *same* input buffers (the same
        addresses): when an output does not change at all and the old output does not pass
        against the new reference, the kernel ignores its inputs (it returns a cached or constant
        result, whatever it keys its cache on)."""
        import torch

        m2 = materialize(self.spec, case, self.device, salt=1)
        upstream = self.ref.upstream(case, salt=1)
        truth = self.ref.truth_later(case, out1, salt=1)  # computed while the candidate runs
        rep = cand.call(case, upstream, refill=m2)
        ref2, base2, cond2 = truth()
        if rep.status != "ok":
            return []
        found = []
        for k, r2 in ref2.items():
            a, b = out1.get(k), rep.outputs.get(k)
            if not isinstance(a, torch.Tensor) or not isinstance(r2, torch.Tensor) or not bitwise_equal(a, b):
                continue
            if not compare(k, a, r2, base2.get(k), self.rule, perturbed=cond2.get(k)).ok:
                found.append(_finding(self.spec_id, case, "insensitive",
                                      f"output {k!r} did not change when the inputs changed, and the old result is "
                                      f"wrong for the new inputs: the kernel returns a cached or constant result",
                                      repro, output=k))
        return found


def _input_dtypes(case: Case) -> tuple[tuple[str, str], ...]:
    return tuple(sorted((k, c.dtype) for k, c in case.inputs.items()))


def _bytes(t: torch.Tensor) -> bytes:
    return bytes(t.numpy().tobytes()) if t.numel() else b""


def bitwise_equal(a: object, b: object) -> bool:
    import torch

    if not isinstance(a, torch.Tensor) or not isinstance(b, torch.Tensor):
        return a is b
    if a.shape != b.shape or a.dtype != b.dtype:
        return False
    if not a.numel():
        return True
    return torch.equal(as_bytes(a), as_bytes(b))

