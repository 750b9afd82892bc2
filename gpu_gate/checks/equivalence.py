"""The equivalence check: fuzzed cases against a float64 reference, with a
baseline-relative tolerance, anti-exploit guards, an error-growth sweep along
reduction dims, and shrinking of the first failure of each kind."""
from __future__ import annotations

import shlex
import sys
import time
from typing import TYPE_CHECKING, Any

from ..findings import Finding, Severity, Status

if TYPE_CHECKING:
    from ..harness import Context, Outcome
    from ..jobs import Job

INTERPRETER_BAD_DTYPES = frozenset({"bfloat16", "float8_e4m3fn", "float8_e5m2"})
CPU_BUDGET_BYTES = 64 << 20
SANITIZER_BUDGET_BYTES = 4 << 20  # CPU cases stay small: the default budget must finish in a minute
GROWTH_SLOPE_MARGIN = 0.3  # log10(error) per log10(length), beyond the baseline's slope


def _setup_torch() -> None:
    import warnings

    import torch

    # torch fills every torch.empty with NaN in deterministic mode: a scratch buffer the
    # kernel never writes then poisons the result instead of passing by luck (zeroed memory).
    torch.use_deterministic_algorithms(True, warn_only=True)
    torch.utils.deterministic.fill_uninitialized_memory = True  # type: ignore[attr-defined]
    warnings.filterwarnings("ignore", message=".*deterministic.*")
    warnings.filterwarnings("ignore", category=UserWarning)


def repro_command(job: Job, check: str = "equivalence") -> str:
    assert job.spec is not None
    return f"gpu-gate repro {shlex.quote(job.spec.id)} --check {check} --case {{token}}"


def _unsupported(ctx: Context, device: str) -> tuple[frozenset[str], str | None]:
    import torch

    bad: set[str] = set()
    why = None
    if ctx.triton_interpret and "triton" in sys.modules:
        bad |= INTERPRETER_BAD_DTYPES
        why = "the Triton interpreter (no GPU) computes bfloat16/float8 arithmetic wrongly"
    for f8 in ("float8_e4m3fn", "float8_e5m2"):
        if not hasattr(torch, f8):
            bad.add(f8)
    return frozenset(bad), why


def run(job: Job, ctx: Context) -> Outcome:
    from ..harness import Outcome, load_spec

    spec = load_spec(job, ctx)
    if ctx.device not in spec.devices:
        return Outcome(Status.NOT_RUN, reason=f"no GPU: spec {spec.name!r} runs only on {', '.join(spec.devices)}")
    _setup_torch()
    return Equivalence(job, ctx, spec).run()


class Equivalence:
    def __init__(self, job: Job, ctx: Context, spec: Any) -> None:
        from ..equivalence.compare import Rule
        from ..equivalence.engine import CaseRunner

        self.job, self.ctx, self.spec = job, ctx, spec
        o = job.options
        tol = o.get("tolerance") or {}
        st = spec.tolerance
        self.rule = Rule(
            baseline_factor=st.baseline_factor or tol.get("baseline_factor") or 2.0,
            atol=st.atol if st.atol is not None else tol.get("atol"),
            rtol=st.rtol if st.rtol is not None else tol.get("rtol"),
        )
        self.runner = CaseRunner(spec, job.spec.id, ctx.device, self.rule, repro_command(job))  # type: ignore[union-attr]
        budget = int(o.get("max_case_bytes") or 256 << 20)
        self.budget = budget if ctx.device == "cuda" else min(budget, CPU_BUDGET_BYTES)
        # Under compute-sanitizer every access is instrumented (about 18x slower): a few
        # small cases (the canonical one has a tail; fuzzed ones span several blocks).
        self.sanitized = bool(ctx.sanitizer or o.get("sanitizer"))
        if self.sanitized:
            self.budget = min(self.budget, SANITIZER_BUDGET_BYTES)
        self.deadline = min(ctx.deadline, time.monotonic() + float(o.get("time_budget_s") or 300))

    def _schedule(self) -> tuple[list[Any], list[str], str | None]:
        from ..equivalence.cases import Case, ScheduleOptions, allowed_dtypes, schedule

        bad, why = _unsupported(self.ctx, self.ctx.device)
        o = self.job.options
        opts = ScheduleOptions(cases=int(o.get("cases") or 64), seed=int(o.get("seed") or self.job.seed),
                               dtypes=tuple(o["dtypes"]) if o.get("dtypes") else None,
                               max_case_bytes=self.budget, unsupported_dtypes=bad)
        _, dropped = allowed_dtypes(self.spec, opts)
        if self.job.case:
            return [Case.from_token(self.job.case)], [], None
        return schedule(self.spec, opts), dropped, why

    def run(self) -> Outcome:
        from ..equivalence.engine import ContextLost, SpecBroken
        from ..harness import Outcome

        cases, dropped, why = self._schedule()
        notes: list[Finding] = []
        if dropped:
            notes.append(self._note("dtype-not-run", f"{', '.join(dropped)} cases not run: {why}"))
        if not cases:
            return Outcome(Status.NOT_RUN, notes, reason=f"no case could run here: {why or 'no dtype left'}")
        results, refusals = [], []
        try:
            for i, case in enumerate(cases):
                if time.monotonic() > self.deadline and results:
                    notes.append(self._note("budget", f"ran {len(results)} of {len(cases)} cases within the "
                                                      f"time budget"))
                    break
                r = self.runner.run(case, sensitivity=(i % 4 == 0 and not self.sanitized))
                if r.refused:
                    refusals.append(r)
                    if i == 0 and not self.job.case:
                        break  # the canonical case was refused: nothing was verified
                results.append(r)
            extra: dict[str, Any] = {}
            want_growth = self.job.options.get("growth", True) and not self.job.case and not self.sanitized
            growth = self._growth() if want_growth else None
        except SpecBroken as exc:
            f = Finding(check="equivalence", kind="reference-error", spec=self.job.spec.id,  # type: ignore[union-attr]
                        file=self.job.spec.file, line=self.spec.line or None,  # type: ignore[union-attr]
                        message=f"{exc} (fix the reference in {self.job.spec.file})")  # type: ignore[union-attr]
            return Outcome(Status.ERROR, [f, *notes], cases=len(results), reason=str(exc))
        except ContextLost as exc:
            f = Finding(check="equivalence", kind="cuda-error", spec=self.job.spec.id,  # type: ignore[union-attr]
                        message=f"the kernel broke the CUDA context: {exc}")
            return Outcome(Status.FAILED, [f, *notes], cases=len(results), reason="CUDA context lost")
        findings = self._summarize(results, refusals, cases)
        if growth:
            extra["growth"] = growth["table"]
            findings += growth["findings"]
        findings += notes
        failed = any(f.severity is Severity.ERROR for f in findings)
        return Outcome(Status.FAILED if failed else Status.PASSED, findings, cases=len(results), extra=extra)

    def _note(self, kind: str, message: str) -> Finding:
        return Finding(check="equivalence", kind=kind, message=message, severity=Severity.NOTE,
                       spec=self.job.spec.id)  # type: ignore[union-attr]

    def _summarize(self, results: list[Any], refusals: list[Any], cases: list[Any]) -> list[Finding]:
        findings: list[Finding] = []
        groups: dict[tuple[str, str], list[Finding]] = {}
        for r in results:
            for f in r.findings:
                groups.setdefault((f.kind, str(f.details.get("output", ""))), []).append(f)
        for (kind, _), fs in groups.items():
            first = fs[0]
            shrinking = self.job.options.get("shrink", True) and not self.job.case and not self.sanitized
            if first.severity is Severity.ERROR and shrinking:
                first = self._shrink(first, cases)
            ids = [f.case for f in fs]
            msg = first.message
            if len(fs) > 1:
                msg += f"\n(failed {len(fs)} of {len(results)} cases: {', '.join(i or '?' for i in ids[:8])}" \
                       f"{' ...' if len(ids) > 8 else ''})"
            findings.append(Finding(check=first.check, kind=kind, message=msg, severity=first.severity,
                                    spec=first.spec, case=first.case, repro=first.repro,
                                    details={**first.details, "failed_cases": len(fs), "cases": len(results)}))
        if refusals:
            r0 = refusals[0]
            canonical = r0.case.id == "c0000"
            sid = self.job.spec.id  # type: ignore[union-attr]
            repro = self.runner.repro_cmd.format(token=r0.case.token())
            if canonical:
                findings.append(Finding(
                    check="equivalence", kind="refused-canonical", spec=sid, case=r0.case.id, repro=repro,
                    message=f"the candidate refused the canonical case ({r0.case.describe()}): {r0.refused}; "
                            f"nothing was verified"))
            else:
                findings.append(Finding(
                    check="equivalence", kind="refused", severity=Severity.WARNING, spec=sid, case=r0.case.id,
                    repro=repro, details={"refused_cases": len(refusals)},
                    message=f"the candidate refused {len(refusals)} of {len(results)} cases, first "
                            f"{r0.case.describe()}: {r0.refused}"))
        return findings

    def _shrink(self, finding: Finding, cases: list[Any]) -> Finding:
        from ..equivalence.shrink import shrink

        budget = float(self.job.options.get("shrink_budget_s") or 60)
        deadline = min(self.deadline + budget, time.monotonic() + budget)
        return shrink(self.runner, self.spec, finding, deadline)

    def _growth(self) -> dict[str, Any] | None:
        from ..equivalence.growth import sweep

        bad, _ = _unsupported(self.ctx, self.ctx.device)
        return sweep(self.runner, self.spec, self.job, self.budget, bad, self.deadline)
