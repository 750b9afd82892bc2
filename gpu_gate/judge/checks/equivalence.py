"""The equivalence check: fuzzed cases against a float64 reference, with a
baseline-relative tolerance, anti-exploit guards, an error-growth sweep along
reduction dims, and shrinking of the first failure of each kind."""
from __future__ import annotations

import contextlib
import dataclasses
import re
import shlex
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ...findings import Finding, Severity, Status
from ...job_extra import JobExtra

if TYPE_CHECKING:
    from types import ModuleType

    from ...protocol.cases import Case
    from ..disguised import Running
    from ...protocol.shapes import Threshold
    from ...spec import Spec
    from ..equivalence.compare import Rule
    from ..equivalence.engine import CaseResult
    from ..workers import Workers
    from ..job import Context, Outcome
    from ...protocol.jobs import Job

INTERPRETER_BAD_DTYPES = frozenset({"bfloat16", "float8_e4m3fn", "float8_e5m2"})
CPU_BUDGET_BYTES = 64 << 20  # CPU cases stay small: the default budget must finish in a minute
SANITIZER_BUDGET_BYTES = 4 << 20  # under compute-sanitizer every access is instrumented (about 18x slower)
TRACE_LINES = 40  # the end of a traceback shown in a message (the whole one is in the details)
REPLAY_CASES = 3  # passed cases run again at the end of the job, in plain tensors
SENSITIVITY_EVERY = 4  # the input-sensitivity probe runs on every 4th case (the canonical one included)




_FRAME = re.compile(r'^\s*File "([^"]+)", line (\d+), in ')
_CHAINED = re.compile(r"^(The above exception was the direct cause of the following exception:|"
                      r"During handling of the above exception, another exception occurred:)$", re.M)


def _canonical_refused_alone(refusals: list[CaseResult]) -> bool:
    """The canonical case was refused and the job stopped there (not refused at the base too)."""
    return bool(refusals) and refusals[0].case.id == "c0000" and refusals[0].refused_at_base is None


_OWN = (Path(__file__).resolve().parent.parent / "worker").as_posix()  # the worker's frames: gpu-gate's call


def _trace_tail(trace: str | None, lines: int = 12) -> str:
    """The end of a refusal's traceback, for the message (the whole one is in the details), without
    the frames of gpu-gate's own worker that made the call: what the spec and the code under test
    did, and what they raised."""
    if not trace:
        return ""
    kept: list[str] = []
    own = False
    for line in trace.rstrip().splitlines():
        m = _FRAME.match(line)
        if m:
            own = Path(m.group(1)).as_posix().startswith(_OWN)
        elif not line.startswith(" "):
            own = False  # the exception's own lines, a chain's separator, "Traceback ..."
        if not own:
            kept.append(line)
    return "\n" + "\n".join(kept[-lines:])


def innermost_repo_frame(trace: str, repo_root: str | Path) -> tuple[str, int] | None:
    """(repo-relative file, line) of the innermost frame inside the repository of the first error
    in ``trace`` (Python prints a chain's root cause first): the kernel's line where the Triton
    interpreter stopped, not the wrapper's launch. None when no frame is in the repository."""
    root = Path(repo_root).resolve()
    for section in _CHAINED.split(trace)[::2]:
        found = None
        for line in section.splitlines():
            m = _FRAME.match(line)
            if m:
                try:
                    found = (Path(m.group(1)).resolve().relative_to(root).as_posix(), int(m.group(2)))
                except ValueError:
                    continue
        if found:
            return found
    return None


def repro_command(job: Job, check: str = "equivalence") -> str:
    """The command that runs one case again. A job judged by the base's spec (a pull request) names
    the base, so that the repro judges by the same spec, not the one in the work tree."""
    from ...protocol.jobs import carried

    assert job.spec is not None
    base = (carried(job) or {}).get("commit")
    at_base = f" --base {shlex.quote(str(base)[:12])}" if isinstance(base, str) and base else ""
    return f"gpu-gate repro {shlex.quote(job.spec.id)} --check {check}{at_base} --case {{token}}"


def unsupported_dtypes(ctx: Context, workers: Workers) -> tuple[frozenset[str], str | None]:
    """The dtypes no case may take here. ``workers``: the job's workers; the candidate's found Triton in
    the code it imported from the repository (``uses_triton``) and says which adaptations of the
    Triton interpreter it put in place (``interpreter``: with ``bfloat16``, bfloat16 runs as on a GPU)."""
    import torch

    bad: set[str] = set()
    why = None
    if ctx.triton_interpret and workers.uses_triton:
        emulated = {"bfloat16"} & set(workers.interpreter)
        bad |= INTERPRETER_BAD_DTYPES - emulated
        wrong = "float8" if emulated else "bfloat16/float8"
        why = f"the Triton interpreter (no GPU) computes {wrong} arithmetic wrongly"
    for f8 in ("float8_e4m3fn", "float8_e5m2"):
        if not hasattr(torch, f8):
            bad.add(f8)
            why = why or f"this torch has no {f8}"
    return frozenset(bad), why


def run(job: Job, ctx: Context) -> Outcome:
    from ..job import Outcome

    workers = ctx.open_workers(job)
    spec = workers.spec
    if ctx.device not in spec.devices:
        return Outcome(Status.NOT_RUN, reason=f"no GPU: spec {spec.name!r} runs only on {', '.join(spec.devices)}")
    return Equivalence(job, ctx, workers).run()


def make_rule(spec: Spec, options: dict[str, Any]) -> Rule:
    """The spec's tolerance wins over the policy's, field by field (atol/rtol as a pair)."""
    from ..equivalence.compare import Rule

    tol = options.get("tolerance") or {}
    st = spec.tolerance
    fixed = (st.atol, st.rtol) if st.atol is not None else (tol.get("atol"), tol.get("rtol"))
    return Rule(baseline_factor=float(st.baseline_factor or tol.get("baseline_factor") or 2.0),
                atol=fixed[0], rtol=fixed[1])


def _confirmed_red(r: CaseResult) -> bool:
    """Whether the case makes the job red whatever the other cases say: a blocking failure that is
    the change's (marked new by the differential, which ran the noise sampling and the regression's
    reruns on it already) or, with no base, any blocking failure. Not a refusal (judged against the
    base over the whole job), nor a failure that shows by chance (the base may show it on a later
    case: see CaseRunner.chance_at_base)."""
    from ..equivalence.engine import BY_CHANCE

    return r.refused is None and any(
        f.severity is Severity.ERROR and f.kind not in BY_CHANCE and f.details.get("change", "new") == "new"
        for f in r.findings)


class Equivalence:
    def __init__(self, job: Job, ctx: Context, workers: Workers) -> None:
        from ..equivalence.engine import CaseRunner

        assert job.spec is not None
        self.job, self.ctx, self.workers = job, ctx, workers
        self.spec = spec = workers.spec
        o = job.options
        self.rule = make_rule(spec, o)
        self.runner = CaseRunner(spec, job.spec.id, ctx.device, self.rule, repro_command(job), workers.candidate,
                                 workers.reference, base=workers.base,
                                 regression_factor=float(o.get("regression_factor") or 4.0))
        budget = int(o.get("max_case_bytes") or 256 << 20)
        self.budget = budget if ctx.device == "cuda" else min(budget, CPU_BUDGET_BYTES)
        self.sanitized = bool(ctx.sanitizer or o.get("sanitizer"))
        if self.sanitized:
            self.budget = min(self.budget, SANITIZER_BUDGET_BYTES)
            for worker in (workers.candidate, workers.base):
                if worker is not None:
                    worker.exact = True  # no guard band for the tool to miss an overrun in
        self.seed = int(o["seed"]) if o.get("seed") is not None else int(job.seed)
        from ..equivalence.floor import SLOW_CASE_S, Clock

        # gpu-gate's own time and the candidate's, accounted apart (see judge.equivalence.floor)
        own = float(o.get("time_budget_s") or 300)
        head = workers.candidate
        self.clock = Clock(own_s=own, candidate_s=float(o.get("candidate_budget_s") or own), hard=ctx.deadline,
                           busy=lambda: float(getattr(head, "busy_s", 0.0)))
        self.slow_case_s = float(o.get("slow_case_s") or SLOW_CASE_S.get(ctx.device, SLOW_CASE_S["cpu"]))
        self.slow: list[tuple[str, float]] = []  # (case id, the candidate's seconds on it) over slow_case_s
        self.floor_missed: tuple[int, int] | None = None  # (floor cases not run, the floor's size)
        self.phases: dict[str, float] = {}
        self.replayed: list[str] = []  # the cases run again at the end, in plain tensors
        self.disguised_notes: list[Finding] = []  # what the disguised replay could not run, and why
        self.ahead_started: dict[str, str] = {}  # compiling ahead, per side: "started", or why not
        self.ahead_done: dict[str, dict[str, object]] = {}  # per side, what its sibling said it did
        self.finish_times: dict[str, object] = {}  # the head's worker's answer to finish, as it timed it
        self.sizes_info: dict[str, object] | None = None  # the thresholds read from the wrapper (see sizes.read)
        self.sizes_skipped: list[str] = []  # planned sizes that cannot run within the case budget, and why
        self.magnitudes: dict[str, float] = {}  # the scale each extreme-magnitude case took
        # stop at the first confirmed new failure (stop_at_red, resolved by the gate: see local_loop);
        # not under a sanitizer, where the cases drive the tool and a wrong result is not the verdict
        self.stop_at_red = o.get("stop_at_red") is True and not self.sanitized
        self.stopped_at: tuple[str, int] | None = None  # (the case, how many had run) where it stopped

    @property
    def deadline(self) -> float:
        """When gpu-gate's own budget ends: later by the candidate's time (see judge.equivalence.floor)."""
        return self.clock.deadline()

    @property
    def spec_id(self) -> str:
        assert self.job.spec is not None
        return self.job.spec.id

    def schedule(self) -> tuple[list[Case], list[str], str | None]:
        from ...protocol.cases import (
            PRODUCTION_CASE_BYTES,
            Case,
            ScheduleOptions,
            allowed_dtypes,
            production_cases,
            schedule_and_skipped,
        )

        from ..equivalence import sizes

        bad, why = unsupported_dtypes(self.ctx, self.workers)
        if self.job.case:
            opts = ScheduleOptions.from_options(self.job.options, seed=self.seed, budget=self.budget, unsupported=bad)
            _, dropped = allowed_dtypes(self.spec, opts)
            return [Case.from_token(self.job.case)], [], None
        thresholds: tuple[Threshold, ...] = ()
        if self.job.options.get("planned", True):
            with self._timed("read_sizes"):
                thresholds, self.sizes_info = sizes.read(self.job, self.spec, Path(self.ctx.repo_root))
        opts = ScheduleOptions.from_options(self.job.options, seed=self.seed, budget=self.budget, unsupported=bad,
                                            thresholds=thresholds)
        _, dropped = allowed_dtypes(self.spec, opts)
        cases, self.sizes_skipped = schedule_and_skipped(self.spec, opts)
        # Production shapes: after the canonical case, larger than the fuzzing budget where a GPU allows.
        roomy = max(self.budget, PRODUCTION_CASE_BYTES) if self.ctx.device == "cuda" and not self.sanitized \
            else self.budget
        production, self.shapes_skipped = production_cases(self.spec, opts, roomy)
        return cases[:1] + production + cases[1:], dropped, why

    def run(self) -> Outcome:
        from ..equivalence.engine import ContextLost, SpecBroken
        from ...protocol.cases import OVER_BUDGET
        from ..workers import WorkerDied
        from ..job import Outcome

        try:
            cases, dropped, why = self.schedule()
        except ValueError as exc:  # a malformed --case token
            return Outcome(Status.ERROR, [self._error("bad-case", f"cannot read the case token: {exc} (copy it "
                                                                   f"from the report's repro command)")],
                           reason="bad case token")
        if self.job.options.get("growth_only"):
            return self._growth_only()
        notes: list[Finding] = []
        for why_not in getattr(self, "shapes_skipped", []):
            # too large for this machine: not verified, which fails closed like a check not run
            # (not_run: warn lets it through); a shape that does not fit the spec is a warning
            too_big = why_not.endswith(OVER_BUDGET)
            notes.append(Finding(check="equivalence", kind="shape-not-run", message=why_not, spec=self.spec_id,
                                 severity=Severity.ERROR if too_big else Severity.WARNING))
        if dropped:
            note = self._note("dtype-not-run", f"{', '.join(dropped)} cases not run: {why}")
            notes.append(dataclasses.replace(note, details={**note.details, "dtypes": list(dropped)}))
        if self.sizes_skipped:
            notes.append(self._note("threshold-not-run", f"{len(self.sizes_skipped)} side(s) of the size thresholds "
                                    f"read from the wrapper could not run here: " + "; ".join(self.sizes_skipped[:5])))
        if not cases:
            return Outcome(Status.NOT_RUN, notes, reason=f"no case could run here: {why or 'no dtype left'}")
        results: list[CaseResult] = []
        refusals: list[CaseResult] = []
        self.unsupported: list[CaseResult] = []
        growth = None
        thresholds: list[Finding] = []
        replays: list[Finding] = []
        early = self._prestart_disguised()
        try:
            if not self.job.case:
                from ..equivalence.magnitude import settle_all

                with self._timed("magnitude"):
                    cases, self.magnitudes = settle_all(cases, self.workers.reference, self.workers.spec)
            self._compile_ahead(cases)
            with self._timed("cases"):
                self._run_cases(cases, results, refusals, notes)
            begun: Running | list[Finding] = []
            # what follows the cases adds evidence to a job that may pass: none is needed once it is red
            after = not self.job.case and not self.sanitized and self.stopped_at is None
            try:
                if after:
                    begun, early = self._begin_disguised(results, early), None
                want_growth = self.job.options.get("growth", True) and after
                if want_growth and not _canonical_refused_alone(refusals):
                    with self._timed("growth"):
                        growth = self._growth()
                    with self._timed("thresholds"):
                        thresholds = self._thresholds()
                if after:
                    with self._timed("replay"):
                        replays = self._replay(results, begun)
            finally:
                if not isinstance(begun, list):
                    begun.stop()  # a replay not concluded (a failure before it): its program is not left running
        except SpecBroken as exc:
            f = Finding(check="equivalence", kind="reference-error", spec=self.spec_id,
                        file=self.job.spec.file if self.job.spec else None, line=self.spec.line or None,
                        message=f"{exc} (fix the reference in {self.job.spec.file if self.job.spec else 'the spec'})")
            return Outcome(Status.ERROR, [f, *notes], cases=len(results), reason=str(exc))
        except ContextLost as exc:
            if isinstance(exc, WorkerDied):
                raise  # the job's verdict: a crash (see judge.job._run_check)
            f = Finding(check="equivalence", kind="cuda-error", spec=self.spec_id,
                        message=f"the kernel broke the CUDA context: {exc}")
            return Outcome(Status.FAILED, [f, *notes], cases=len(results), reason="CUDA context lost")
        finally:
            if early is not None:
                early.stop()  # started before the cases, and no replay took it: not left running
        if self.unsupported and not results:
            f = self._unsupported(len(cases))
            return Outcome(Status.NOT_RUN, [f, *notes], reason=f.message.splitlines()[0])
        if self.floor_missed is not None:
            return self._floor_not_reached(results, cases, notes)
        findings = self._summarize(results, refusals)
        findings += [_with_change_note(f) for f in replays]
        findings += self.disguised_notes
        findings += self._rewritten_reference(results)
        if self.unsupported:
            findings.append(self._unsupported(len(cases)))
        extra = JobExtra(seed=self.seed, rule=self.rule.describe(), cases_planned=self._planned(cases),
                         coverage=coverage(self.spec, [r.case for r in results]))
        if self.replayed:
            extra.replayed = self.replayed
        if self.sizes_info is not None:
            extra.thresholds = {**self.sizes_info, "not_run": self.sizes_skipped}
        if self.magnitudes:
            extra.magnitudes = self.magnitudes
        if growth:
            extra.growth = growth["table"]
            findings += [_with_change_note(f) for f in growth["findings"]]
        have = {(g.kind, g.details.get("output"), g.details.get("change")) for g in findings}
        findings += [_with_change_note(f) for f in thresholds
                     if (f.kind, f.details.get("output"), f.details.get("change")) not in have]
        if not self.sanitized:  # under a tool, the executor compares the tool's reports instead
            findings += self._differential_note(results, findings)
        if self.slow:
            from ..equivalence.floor import slow_case_finding

            findings.append(slow_case_finding(self.spec_id, self.slow, self.slow_case_s,
                                              str(self.job.options.get("slow_case") or "warn")))
        with self._timed("finish"):
            findings += self._launches(extra)
        findings += notes
        extra.timing = self._timing()
        if self.sanitized:
            # Under compute-sanitizer the cases only drive the kernel: a wrong result is the
            # equivalence job's verdict. Reported twice, it would read as two failures.
            findings = [_seen_under_sanitizer(f) for f in findings
                        if not (f.check == "equivalence" and f.details.get("change") == "fixed")]
        failed = any(f.severity is Severity.ERROR for f in findings)
        return Outcome(Status.FAILED if failed else Status.PASSED, findings, cases=len(results), extra=extra)

    def _floor_not_reached(self, results: list[CaseResult], cases: list[Case], notes: list[Finding]) -> Outcome:
        """The job's time limit came before the floor of cases: nothing this job says is enough to pass."""
        from ..equivalence.floor import floor_missed_reason
        from ..job import Outcome

        assert self.floor_missed is not None
        missing, size = self.floor_missed
        why = floor_missed_reason(len(results), len(cases), size, missing, self.clock.candidate())
        f = Finding(check="equivalence", kind="floor-not-reached", severity=Severity.ERROR, spec=self.spec_id,
                    message=why, details={"floor": size, "missing": missing, "ran": len(results)})
        found = [x for x in self._summarize(results, []) if x.severity is Severity.ERROR]
        status = Status.FAILED if found else Status.NOT_RUN  # a failure already seen stays one
        return Outcome(status, [*found, f, *notes], cases=len(results), reason=why)

    def _launches(self, extra: JobExtra) -> list[Finding]:
        """The Triton specializations the cases launched (``extra.specializations``); on a GPU, each
        one of the spec's kernel files compiled for the compile check's archs, with its resources
        (``extra.launch_resources``); without one, where the interpreter ran them, compiled for the
        lint architecture (sm_90), whose PTX is read the same way. The candidate worker recorded and
        compiled them (the launches exist only in its process) and reports what came out;
        :mod:`gpu_gate.judge.checks.compile_launched` decides what that means."""
        from ..workers import BaseLost

        settings = self.job.options.get("compile")
        here = self.ctx.device == "cuda" or self.ctx.triton_interpret
        wanted = here and not self.sanitized and not self.job.case and isinstance(settings, dict)
        start = time.monotonic()
        if self.workers.base is not None and "base" in self.ahead_started:
            with contextlib.suppress(BaseLost):  # first: its cores are the head's compile's
                self.ahead_done["base"] = self.workers.base.ahead_done()
        asked = time.monotonic()
        done = self.workers.finish(settings if wanted else None)
        self.finish_times["base_ahead_done_s"] = round(asked - start, 2)
        self.finish_times["head_finish_s"] = round(time.monotonic() - asked, 2)
        if done.ahead is not None:  # the head's worker's sibling, as it says: for the timing report only
            self.ahead_done["head"] = dict(done.ahead)
            if done.compile_taken is not None:  # of the compile check's builds, made by the sibling
                self.ahead_done["head"]["launched_taken"] = done.compile_taken
        # the head's worker's own account (timing only)
        self.finish_times.update({f"head_{k}": v for k, v in done.finish_times.items()})
        if done.specializations:
            extra.specializations = [dict(s) for s in done.specializations]
        notes = []
        untimed = done.untimed_autotune
        if untimed:
            names = ", ".join(n[:80] for n in untimed[:10])
            why = ("under the Triton interpreter (no GPU), which cannot time them" if self.ctx.device != "cuda"
                   else "as the policy says (autotune: rotate)")
            notes.append(self._note("autotune-untimed", f"the autotuned kernels {names} ran their configs in turn, "
                                    f"untimed, {why}: each new key took the next config of its list, so the cases "
                                    f"reach every config; in production the autotuner times them and runs the "
                                    f"fastest for each key"))
        compiled = done.compile
        if not wanted or (compiled is None and not done.specializations):
            return notes
        from .compile_launched import judge
        from .compiled_offsets import KIND as KIND_OFFSET

        read: set[str] = set()
        findings, extra.launch_resources = judge(compiled, settings, read)
        extra.launches_linted = sorted(read)  # the kernels whose launched PTX was read (races, 32-bit offsets)
        if any(f.kind in ("compile-error", KIND_OFFSET) for f in findings) and self.workers.base is not None:
            findings = self._launched_against_base(findings, settings, read)
        return notes + findings

    def _launched_against_base(self, findings: list[Finding], settings: dict[str, object] | None,
                               read: set[str]) -> list[Finding]:
        """A launched specialization that does not compile at head, or whose PTX computes an offset
        in 32 bits, is the change's only if the base's code, launched by the same cases, does not do
        the same: the base's worker compiles its own launches now (only when the head's show either;
        see :func:`compile_launched.against_base`). ``read``: the kernels whose PTX the head sent."""
        from ..workers import BaseLost
        from ...protocol.jobs import base_commit
        from .compile_launched import against_base

        commit = str(base_commit(self.job) or "")
        try:
            assert self.workers.base is not None
            answer = self.workers.base.finish(settings).compile
        except BaseLost as exc:
            return findings + [self._note("differential", f"the launched specializations were not compared with the "
                                          f"base's code ({commit[:12]}): {exc}")]
        return against_base(findings, answer, commit, read)

    def _run_cases(self, cases: list[Case], results: list[CaseResult], refusals: list[CaseResult],
                   notes: list[Finding]) -> None:
        from ..equivalence.floor import floor

        must = floor(cases, self.ctx.device) if not self.job.case else set()
        skipped = 0
        for i, case in enumerate(cases):
            if time.monotonic() > self.deadline and results:
                if i not in must:  # the budget is spent: only the floor's cases still run
                    skipped += 1
                    continue
                if time.monotonic() > self.ctx.deadline:
                    self.floor_missed = (len([j for j in must if j >= i]), len(must))
                    break
            before = self.clock.candidate()
            r = self.runner.run(case, sensitivity=(i % SENSITIVITY_EVERY == 0 and not self.sanitized))
            if self.clock.candidate() - before > self.slow_case_s:
                self.slow.append((case.id, self.clock.candidate() - before))
            if r.unsupported:
                self.unsupported.append(r)
                if i == 0:
                    break  # the canonical case cannot run here: nothing can be verified here
                continue
            results.append(r)
            if self.stop_at_red and _confirmed_red(r):
                self.stopped_at = (case.id, i + 1)
                break
            if r.refused:
                refusals.append(r)
                if i == 0 and not self.job.case and r.refused_at_base is None:
                    break  # the canonical case was refused, and not at the base too: nothing was verified
        if self.stopped_at is not None:
            at, ran = self.stopped_at
            notes.append(self._note("stopped-at-red", f"stopped at the first confirmed new failure (case {at}, "
                                    f"{ran} of {len(cases)} cases run): the other cases, the growth sweep and the "
                                    f"replays were not run (stop_at_red; in CI every case runs)"))
        if skipped or self.floor_missed:
            notes.append(self._note("budget", f"ran {len(results)} of {len(cases)} cases within the time budget "
                                              f"(gpu-gate's own {self.clock.own_s:g} s; the kernel's calls took "
                                              f"{self.clock.candidate():.1f} s on top), the floor of {len(must)} "
                                              f"cases included"))

    def _picks(self, results: list[CaseResult]) -> list[Case]:
        """The passed cases replayed at the end: the canonical case, the largest passed and one between."""
        passed = [r.case for r in results if not r.refused and not r.failed and r.case.id[:1] != "p"]
        if not passed:
            return []
        picks = [passed[0]]
        by_size = sorted(passed[1:], key=lambda c: sum(c.dims.values()))
        for c in (by_size[-1:] + by_size[len(by_size) // 2:len(by_size) // 2 + 1]):
            if c not in picks and len(picks) < REPLAY_CASES:
                picks.append(c)
        return picks

    def _prestart_disguised(self) -> Running | None:
        """The head's disguised program, started before the cases so that its imports run beside them
        (see judge.disguised.prestart); None where this job will not replay."""
        from .. import disguised

        if self.job.case or self.sanitized or not self.job.options.get("disguised_replay", True):
            return None
        return disguised.prestart(self.runner, self.ctx.disguised, self.job, self.ctx.deadline)

    def _begin_disguised(self, results: list[CaseResult], early: Running | None = None) -> Running | list[Finding]:
        """Start the disguised replay of the cases the replay picks (see judge.disguised): the program
        imports torch and compiles while the judge goes on with the rest of the job (``early``: the
        program started before the cases, given its batch now)."""
        from .. import disguised

        if not self.job.options.get("disguised_replay", True):
            if early is not None:
                early.stop()
            return []
        picks = self._picks(results)
        if self.ctx.device == "cpu":
            # Triton's interpreter computes 16-bit floats wrongly unless the worker adapts it (see
            # worker.interpreter), and the plain program does not: there, only cases whose data is
            # float32 or wider, the first passed such case where none of the picked ones is
            passed = [r.case for r in results if not r.refused and not r.failed and r.case.id[:1] != "p"]
            picks = [c for c in picks if _interpreted_alike(c)] or [c for c in passed if _interpreted_alike(c)][:1]
        # its own time limit comes out of the job's, not the cases' budget
        return disguised.begin(self.runner, picks, self.ctx.disguised, self.job, self.ctx.deadline, early)

    def _replay(self, results: list[CaseResult], begun: Running | list[Finding]) -> list[Finding]:
        """A few passed cases again, last of all and in reverse order, in plain tensors: the
        canonical case, the largest passed and one between (see ``CaseRunner.replay``). The first
        replay that fails is reported; the rest are not needed. Then what the disguised replay of
        the same cases found (see judge.disguised)."""
        from .. import disguised

        for case in reversed(self._picks(results)):
            if time.monotonic() > self.deadline:
                break
            found = self.runner.replay(case)
            self.replayed.append(case.id)
            if found:
                return found
        with self._timed("disguised_replay"):
            found, self.disguised_notes = disguised.conclude(self.runner, begun, self.ctx.disguised, self.job,
                                                             self.ctx.deadline)
        return found

    def _unsupported(self, total: int) -> Finding:
        """Cases the Triton interpreter could not run (libdevice, inline asm, an op it lacks):
        not a refusal by the kernel, and not a pass. On a GPU they run compiled."""
        r0 = self.unsupported[0]
        canonical = r0.case.id == "c0000" and not self.job.case
        head = ("the spec could not run under the Triton interpreter" if canonical else
                f"{len(self.unsupported)} of {total} cases could not run under the Triton interpreter")
        where = innermost_repo_frame(r0.trace or "", self.ctx.repo_root)
        at = f" at {where[0]}:{where[1]}" if where else ""
        return Finding(check="equivalence", kind="interpreter-unsupported",
                       severity=Severity.NOTE if canonical else Severity.WARNING, spec=self.spec_id, case=r0.case.id,
                       file=where[0] if where else None, line=where[1] if where else None,
                       repro=self.runner.repro_cmd.format(token=r0.case.token()),
                       message=f"{head} (no GPU here){at}: {r0.unsupported}; first case {r0.case.describe()}. They run "
                               f"on a GPU.\n" + "\n".join((r0.trace or "").rstrip().splitlines()[-TRACE_LINES:]),
                       details={"unsupported_cases": len(self.unsupported), "traceback": r0.trace,
                                "case": r0.case.describe(), "token": r0.case.token()})

    def _planned(self, cases: list[Case]) -> int:
        """The cases the policy asked for (or more, with production shapes): the report says how
        many of them ran, where dtypes were dropped or cases refused."""
        return len(cases) if self.job.case else max(len(cases), int(self.job.options.get("cases") or 0))

    def _note(self, kind: str, message: str) -> Finding:
        return Finding(check="equivalence", kind=kind, message=message, severity=Severity.NOTE, spec=self.spec_id)

    def _error(self, kind: str, message: str) -> Finding:
        return Finding(check="equivalence", kind=kind, message=message, spec=self.spec_id)

    def _summarize(self, results: list[CaseResult], refusals: list[CaseResult]) -> list[Finding]:
        findings: list[Finding] = []
        groups: dict[tuple[str, str, str], list[Finding]] = {}
        from ..equivalence.engine import chance_debt

        chance = self.runner.chance_at_base
        for r in results:
            for f in chance_debt(r.findings, chance):
                what = str(f.details.get("output", f.details.get("input", "")))
                groups.setdefault((str(f.details.get("change", "")), f.kind, what), []).append(f)
        shrinking = self.job.options.get("shrink", True) and not self.job.case and not self.sanitized
        for (change, kind, _), fs in groups.items():
            first = fs[0]
            # the repository's debt is reported, not shrunk: the time goes to what this change did
            if first.severity is Severity.ERROR and shrinking and change != "pre-existing":
                first = self._shrink(first)
            ids = [f.case for f in fs]
            msg = first.message
            if len(fs) > 1:
                msg += f"\n(failed {len(fs)} of {len(results)} cases: {', '.join(i or '?' for i in ids[:8])}" \
                       f"{' ...' if len(ids) > 8 else ''})"
            findings.append(Finding(check=first.check, kind=kind, message=msg, severity=first.severity,
                                    spec=first.spec, case=first.case, repro=first.repro,
                                    details={**first.details, "failed_cases": len(fs), "cases": len(results)}))
        if refusals:
            findings += self._refusal(refusals, len(results))
        findings += self._fixed(results)
        return [_with_change_note(f) for f in findings]

    def _fixed(self, results: list[CaseResult]) -> list[Finding]:
        """The base's failures that the head's code no longer has, on the same cases: good news."""
        groups: dict[tuple[str, str], list[Finding]] = {}
        for r in results:
            for f in r.fixed:
                groups.setdefault((f.kind, str(f.details.get("output", f.details.get("input", "")))), []).append(f)
        out = []
        for (kind, what), fs in groups.items():
            first = fs[0]
            on = f" on {what!r}" if what else ""
            out.append(Finding(check="equivalence", kind=kind, severity=Severity.NOTE, spec=first.spec,
                               case=first.case, repro=first.repro,
                               message=f"fixed by this change: the base's code failed {len(fs)} of {len(results)} "
                                       f"cases with {kind}{on} (first {first.details.get('case', first.case)}); the "
                                       f"head's code passes them\n{first.message}",
                               details={**first.details, "change": "fixed", "failed_cases": len(fs),
                                        "cases": len(results)}))
        return out

    def _rewritten_reference(self, results: list[CaseResult]) -> list[Finding]:
        """Where this change rewrote the spec's reference (the base's judges it), the head's is run on
        the first cases too: a rewrite that gives other results is a weakened rule, since the truth
        the change would be judged by later is then its own. Blocking unless the base's policy says
        ``rule_changes: warn``."""
        from ..equivalence.compare import as_bytes
        from ...protocol.jobs import carried

        base = carried(self.job)
        if not base or not base.get("reference_changed") or self.job.case:
            return []
        import torch

        blocks = base.get("rule_changes", "fail") == "fail"
        checked = 0
        picked = [r for r in results if r.refused is None][:REWRITE_CASES]
        # Every truth of the base's first: the head's spec is imported after them in the same worker
        # (the repository's code too, where its reference needs it), and may change that process.
        truths = [self.workers.reference.truth(r.case, {})[0] for r in picked]
        for r, ours in zip(picked, truths):
            theirs = self.workers.reference.head_reference(r.case)
            if isinstance(theirs, str) and theirs.startswith("not compared"):
                return [self._note("reference-rewritten", f"the head's reference (rewritten by this change) was "
                                                          f"{theirs}")]
            why = _references_differ(ours, theirs, torch, as_bytes)
            if why:
                return [Finding(check="equivalence", kind="rules-weakened", spec=self.spec_id, case=r.case.id,
                                severity=Severity.ERROR if blocks else Severity.WARNING,
                                file=self.job.spec.file if self.job.spec else None,
                                message=f"this change rewrote the spec's reference, and the new one gives other "
                                        f"results on case {r.case.describe()}: {why}. The base's reference judged "
                                        f"this change; a rewritten truth goes through the base branch first",
                                details={"case": r.case.describe(), "token": r.case.token()})]
            checked += 1
        return [self._note("reference-rewritten", f"the head's reference, rewritten by this change, gives the same "
                                                  f"results as the base's on {checked} case(s)")] if checked else []

    def _differential_note(self, results: list[CaseResult], findings: list[Finding]) -> list[Finding]:
        """What the comparison with the base's code covered, or why there was none."""
        from ...protocol.jobs import base_commit

        if not base_commit(self.job):
            return []
        missing = self.workers.base_missing
        if missing is not None:
            return [self._note("differential", f"not compared with the base's code: {missing}; failures are judged "
                                               f"by absolute rules only")]
        compared = sum(r.base_comparisons is not None for r in results)
        count = {c: sum(1 for f in findings if f.details.get("change") == c and f.severity is not Severity.NOTE)
                 for c in ("new", "pre-existing")}
        fixed = sum(1 for f in findings if f.details.get("change") == "fixed")
        text = (f"compared with the base's code ({str(base_commit(self.job))[:12]}) on {compared} of {len(results)} "
                f"cases: {count['new']} new, {count['pre-existing']} pre-existing and {fixed} fixed failure kinds")
        if self.runner.base_refused:
            text += (f"; the base's code refused {len(self.runner.base_refused)} case(s), where the head's failures "
                     f"count as new (first {self.runner.base_refused[0][:300]})")
        if self.runner.on_head_configs:
            text += (f"; on {len(self.runner.on_head_configs)} case(s) the head's autotuned kernels ran other configs "
                     f"than the base's, and the base's code was judged on the head's configs (first "
                     f"{self.runner.on_head_configs[0]})")
        if self.runner.configs_missing:
            where, what = self.runner.configs_missing[0]
            text += (f"; on {len(self.runner.configs_missing)} case(s) the base's code could not run the head's "
                     f"autotune configs and was judged on its own (first {where}: {what[:300]})")
        if self.runner.base_lost:
            text += f"; {self.runner.base_lost}: the cases after it are judged by absolute rules only"
        return [self._note("differential", text)]

    def _refusal(self, refusals: list[CaseResult], total: int) -> list[Finding]:
        """What the head's code refused (raised on). In a differential run each refusal is told
        apart by what the base's code did with the same case: refused it too (the repository's
        debt: a canonical case refused at both commits no longer stops the job, the other cases
        are run); ran it and passed (new: a change that makes the kernel refuse an input it handled
        blocks, unless the policy says ``refusals: ignore``); ran it and got it wrong, or no base."""
        from ..equivalence.engine import marked

        out: list[Finding] = []
        rest = list(refusals)
        r0 = rest[0]
        if r0.case.id == "c0000" and not self.job.case:
            rest.pop(0)
            out.append(self._refused_canonical(r0, ran=total - len(refusals)))
        both = [r for r in rest if r.refused_at_base is not None]
        new = [r for r in rest if r.refused_at_base is None and r.base_passed]
        other = [r for r in rest if r not in both and r not in new]
        if new:
            out.append(marked(self._refused(new, total, Severity.ERROR,
                                            f"the head's code refuses {len(new)} of {total} cases that the base's "
                                            f"code runs and passes"),
                              "new", "the base's code runs these cases and passes them"))
        if both:
            out.append(marked(self._refused(both, total, Severity.WARNING,
                                            f"the candidate refused {len(both)} of {total} cases, as the base's "
                                            f"code does"), "pre-existing", "the base's code refuses them too"))
        if other:
            wrong = sum(r.base_passed is False for r in other)
            text = f"the candidate refused {len(other)} of {total} cases"
            if wrong:
                text += f" (the base's code ran {wrong} of them and got them wrong)"
            out.append(self._refused(other, total, Severity.WARNING, text))
        return out

    def _refused(self, refusals: list[CaseResult], total: int, severity: Severity, text: str) -> Finding:
        r0 = refusals[0]
        where = innermost_repo_frame(r0.trace or "", self.ctx.repo_root)
        return Finding(check="equivalence", kind="refused", severity=severity, spec=self.spec_id, case=r0.case.id,
                       repro=self.runner.repro_cmd.format(token=r0.case.token()),
                       file=where[0] if where else None, line=where[1] if where else None,
                       details={"refused_cases": len(refusals), "cases": total, "token": r0.case.token(),
                                "case": r0.case.describe(), "traceback": r0.trace},
                       message=f"{text}, first {r0.case.describe()}: {r0.refused}{_trace_tail(r0.trace)}")

    def _refused_canonical(self, r0: CaseResult, ran: int) -> Finding:
        """The canonical case refused: nothing was verified, unless the base's code refuses it too
        and other cases ran, when it is the repository's debt (a kernel that no longer compiles for
        that dtype with this Triton at either commit, say)."""
        from ..equivalence.engine import marked

        where = innermost_repo_frame(r0.trace or "", self.ctx.repo_root)
        details = {"refused_cases": 1, "token": r0.case.token(), "case": r0.case.describe(), "traceback": r0.trace}
        head = f"the candidate refused the canonical case ({r0.case.describe()}): {r0.refused}"
        f = Finding(check="equivalence", kind="refused-canonical", spec=self.spec_id, case=r0.case.id,
                    repro=self.runner.repro_cmd.format(token=r0.case.token()), details=details,
                    file=where[0] if where else None, line=where[1] if where else None,
                    message=f"{head}; nothing was verified{_trace_tail(r0.trace)}")
        if r0.refused_at_base is not None:
            if ran:
                same = "" if r0.refused_at_base == r0.refused else f" ({r0.refused_at_base})"
                return marked(dataclasses.replace(f, message=f"{head}; the base's code refuses it too{same}, so "
                                                             f"the other cases were run{_trace_tail(r0.trace)}"),
                              "pre-existing", "the base's code refuses it too")
            return dataclasses.replace(f, message=f"{head}; the base's code refuses it too, and every other case "
                                                  f"was refused: nothing was verified{_trace_tail(r0.trace)}")
        if r0.base_passed:
            return marked(f, "new", "the base's code runs this case and passes it")
        return f

    def _shrink(self, finding: Finding) -> Finding:
        from ..equivalence.shrink import shrink

        budget = float(self.job.options.get("shrink_budget_s") or 60)
        deadline = time.monotonic() + budget
        with self._timed("shrink"):
            return shrink(self.runner, self.spec, finding, deadline)

    def _compile_ahead(self, cases: list[Case]) -> None:
        """On a GPU, have the head's and the base's workers compile the schedule's Triton kernels
        ahead, each in a process beside it (see gpu_gate.worker.ahead): the cases then find most
        of them compiled. Not under compute-sanitizer (the tool would follow the process, and the
        dry runs read memory no kernel wrote), nor for one case (a repro). Decides nothing."""
        from ..workers import BaseLost

        if self.ctx.device != "cuda" or self.sanitized or self.job.case or not self.workers.uses_triton:
            return
        for side, worker in (("head", self.workers.candidate), ("base", self.workers.base)):
            if worker is None:
                continue
            try:
                why = worker.ahead(cases)
            except BaseLost:
                continue  # the base's next call finds it gone, and says so
            self.ahead_started[side] = why or "started"

    def _timed(self, phase: str) -> contextlib.AbstractContextManager[None]:
        from ..equivalence.engine import timed_into

        return timed_into(self.phases, phase)

    def _timing(self) -> dict[str, object]:
        """Where the job's time went, in seconds: the phases (cases, growth sweep, shrinking, the
        compile of the launched specializations) and, across them, the time the judge waited on the
        candidate's worker (its runs, Triton compiles and transfers), on the base's code and on the
        reference beyond what ran beside the candidate, and building the inputs."""
        w = self.workers
        out: dict[str, object] = {f"{k}_s": round(v, 2) for k, v in self.phases.items()}
        out["load_s"] = round(w.load_s, 2)  # the workers' start and spec import, before the first case
        out.update({f"load_{k}": v for k, v in w.load_times.items()})  # the candidate's import of torch, of the spec
        out.update({f"base_load_{k}": v for k, v in w.base_load_times.items()})  # and the base's
        out["candidate_s"] = round(w.candidate.busy_s, 2)
        out["candidate_run_s"] = round(w.candidate.run_s, 3)  # of which in the calls, as the worker says
        out["candidate_compile_s"] = round(w.candidate.compile_s, 2)  # and of that, compiling Triton kernels
        out["reference_wait_s"] = round(w.reference.wait_s, 2)
        out["inputs_s"] = round(self.runner.inputs_s, 2)
        # each step of the cases, in the judge; the base's own calls and comparisons count in its step alone
        out["steps"] = {k: round(v, 2) for k, v in self.runner.steps.items()}
        if self.finish_times:
            out["finish"] = self.finish_times
        out["wire"] = self._wire()
        if w.base is not None:
            out["base_s"] = round(w.base.busy_s, 2)  # waiting on the base, beyond what ran beside the head
            out["base_run_s"] = round(w.base.run_s, 2)
            out["base_compile_s"] = round(w.base.compile_s, 2)
        if self.ahead_started:
            out["ahead"] = {**self.ahead_started, **{f"{side}_{k}": v for side, done in self.ahead_done.items()
                                                     for k, v in done.items()}}
        return out

    def _wire(self) -> dict[str, object]:
        """What crossed the channels, as the judge and each worker counted it (timing only)."""
        from ...protocol import wire
        from ..channel import WorkerLost, WorkerTimeout
        from ..workers import BaseLost, ContextLost, SpecBroken

        out: dict[str, object] = {"judge": wire.stats()}
        for side, worker in (("head", self.workers.candidate), ("base", self.workers.base),
                             ("reference", self.workers.reference)):
            if worker is None or getattr(worker.channel, "lost", None) is not None:
                continue
            with contextlib.suppress(WorkerLost, WorkerTimeout, BaseLost, ContextLost, SpecBroken, KeyError):
                out[side] = worker.stats()
        return out

    def _growth_only(self) -> Outcome:
        """One error-growth sweep and nothing else (``gpu-gate repro --growth DIM:DTYPE``)."""
        from ..job import Outcome

        growth = self._growth()
        if not growth:
            why = (f"no sweep for {self.job.options['growth_only']!r}: the spec has no such reduction dim, the dtype "
                   f"is not among its dtypes or cannot run here, or fewer than three lengths fit the case budget")
            return Outcome(Status.ERROR, [self._error("no-growth-sweep", why)], reason=why)
        findings = growth["findings"]
        failed = any(f.severity is Severity.ERROR for f in findings)
        cases = sum(len(t["rows"]) for t in growth["table"].get("curves", [growth["table"]]))
        return Outcome(Status.FAILED if failed else Status.PASSED, findings, cases=cases,
                       extra=JobExtra(seed=self.seed, growth=growth["table"]))

    def _thresholds(self) -> list[Finding]:
        from ..equivalence.growth import threshold_sweep

        bad, _ = unsupported_dtypes(self.ctx, self.workers)
        return threshold_sweep(self.runner, self.spec, self.job, self.budget, bad, self.deadline, seed=self.seed)

    def _growth(self) -> dict[str, Any] | None:
        from ..equivalence.growth import sweep

        bad, _ = unsupported_dtypes(self.ctx, self.workers)
        return sweep(self.runner, self.spec, self.job, self.budget, bad, self.deadline, seed=self.seed)


def coverage(spec: Spec, cases: list[Case]) -> dict[str, object]:
    """What the cases exercised, per axis: the report shows it and tests assert it."""
    from ...spec import Index

    out: dict[str, Any] = {"cases": len(cases), "dims": {}, "inputs": {}}
    for d in spec.dims:
        sizes = sorted({c.dims[d] for c in cases if d in c.dims})
        out["dims"][d] = {"min": sizes[0] if sizes else None, "max": sizes[-1] if sizes else None,
                          "distinct": len(sizes)}
    for name, inp in spec.inputs.items():
        seen: dict[str, dict[str, int]] = {"dtype": {}, "dist": {}, "layout": {}}
        for c in cases:
            ch = c.inputs.get(name)
            if ch is None:
                continue
            for axis in seen:
                v = getattr(ch, axis)
                seen[axis][v] = seen[axis].get(v, 0) + 1
        out["inputs"][name] = {"kind": "index" if isinstance(inp, Index) else "tensor", **seen}
    out["grad_layout"] = sorted({c.grad_layout for c in cases})
    out["planned"] = [c.why for c in cases if c.why]  # the sides of thresholds and the corners run
    out["coupled"] = sorted({f"{k}: {ch.couple}" for c in cases for k, ch in c.inputs.items() if ch.couple})
    return out


REWRITE_CASES = 4  # cases on which a rewritten reference is run beside the base's


def _references_differ(ours: dict[str, object], theirs: dict[str, object] | str, torch: ModuleType,
                       as_bytes: object) -> str | None:
    """Why two float64 references disagree, or None. Rounding differences of a refactoring (1e-9 of
    the output's scale) do not count: at kernel precision they cannot matter."""
    if isinstance(theirs, str):
        return f"it {theirs}"
    if sorted(ours) != sorted(theirs):
        return f"outputs {sorted(theirs)} instead of {sorted(ours)}"
    for k, a in ours.items():
        b = theirs[k]
        if not isinstance(a, torch.Tensor) or not isinstance(b, torch.Tensor):
            if a != b:
                return f"output {k!r} is {b!r} instead of {a!r}"
            continue
        if a.shape != b.shape:
            return f"output {k!r} has shape {tuple(b.shape)} instead of {tuple(a.shape)}"
        if not a.numel():
            continue
        x, y = a.detach().to(torch.float64), b.detach().to(torch.float64)
        both = torch.isfinite(x) & torch.isfinite(y)
        if not torch.equal(torch.isfinite(x), torch.isfinite(y)) or not torch.equal(x[~both], y[~both]):
            return f"output {k!r} is non-finite in other places"
        diff = float((x - y).abs().where(both, torch.zeros_like(x)).max())
        scale = float(x.abs().where(both, torch.zeros_like(x)).max())
        if diff > 1e-9 * scale + 1e-300:
            return f"output {k!r} differs by up to {diff:.3g} (the base's reference reaches {scale:.3g})"
    return None


def _interpreted_alike(case: Case) -> bool:
    """Whether Triton's interpreter runs a case the same with and without the worker's adaptations:
    no 16-bit float data (see worker.interpreter)."""
    return not any(c.dtype in ("float16", "bfloat16") for c in case.inputs.values())


def _with_change_note(f: Finding) -> Finding:
    """A failure the base's code has too says so where it is read."""
    if f.details.get("change") != "pre-existing" or f.severity is Severity.NOTE or f.kind.startswith("refused"):
        return f  # (a refusal's message says what the base's code did with the case)
    return dataclasses.replace(f, message=f"pre-existing (the base's code fails the same cases the same way): "
                                          f"{f.message}")


def _seen_under_sanitizer(f: Finding) -> Finding:
    if f.check != "equivalence":
        return f
    if "change" in f.details:  # new, pre-existing or fixed: the tool's reports are what is compared here
        f = dataclasses.replace(f, details={k: v for k, v in f.details.items() if k != "change"})
    if f.severity is not Severity.ERROR:
        return f
    return dataclasses.replace(f, severity=Severity.NOTE, message=(
        f"{f.message}\n(seen while the cases ran under compute-sanitizer; the equivalence job gives the verdict "
        f"on results)"))
