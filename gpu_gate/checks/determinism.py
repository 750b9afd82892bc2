"""The determinism check: each case runs R times alone, then R times while background
kernels load the GPU on other streams. Outputs must agree within tolerance; bitwise
only where the spec declares ``deterministic=True`` (fp32 atomics legitimately vary)."""
from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from ..findings import Finding, Status

if TYPE_CHECKING:
    from ..harness import Context, Outcome
    from ..jobs import Job

CASES = 4


@contextlib.contextmanager
def background_load(device: str, enabled: bool) -> Iterator[Any]:
    """Yields a function that queues a burst of matmuls on a side stream (no sync with the caller)."""
    import torch

    if not enabled or device != "cuda":
        yield lambda: None
        return
    side = torch.cuda.Stream()
    a = torch.randn(2048, 2048, device="cuda")

    def burst() -> None:
        with torch.cuda.stream(side):
            for _ in range(4):
                torch.mm(a, a)

    yield burst
    torch.cuda.synchronize()


def run(job: Job, ctx: Context) -> Outcome:
    from ..equivalence.cases import ScheduleOptions, schedule
    from ..equivalence.compare import agree
    from ..equivalence.engine import CaseRunner, ContextLost, is_fatal, sync
    from ..equivalence.inputs import materialize
    from ..harness import Outcome, load_spec
    from .equivalence import Equivalence, _setup_torch, repro_command

    spec = load_spec(job, ctx)
    if ctx.device not in spec.devices:
        return Outcome(Status.NOT_RUN, reason=f"spec {spec.name!r} runs only on {', '.join(spec.devices)}")
    _setup_torch()
    eq = Equivalence(job, ctx, spec)
    repeats = max(2, int(job.options.get("repeats") or 8))
    cases = schedule(spec, ScheduleOptions(cases=CASES, seed=job.seed, dtypes=None, max_case_bytes=eq.budget))
    runner: CaseRunner = eq.runner
    findings: list[Finding] = []
    ran = 0
    for case in cases:
        m = materialize(spec, case, ctx.device)
        repro = repro_command(job, "determinism").format(token=case.token())
        try:
            ref = runner._reference(m, None, upcast=True) if not spec.grads else None
            first, _ = runner._call(m, None)
            sync(ctx.device)
            base = runner._baseline(m, None, first) if ref is not None else None
            for loaded in (False, True):
                with background_load(ctx.device, loaded and bool(job.options.get("concurrent_load", True))) as burst:
                    for i in range(repeats):
                        burst()
                        out, _ = runner._call(m, None)
                        sync(ctx.device)
                        for k, v in first.items():
                            why = agree(k, v, out.get(k), bitwise=spec.deterministic,
                                        ref=(ref or first).get(k, v), base=(base or {}).get(k), rule=eq.rule)
                            if why:
                                when = "under concurrent load" if loaded else "alone"
                                findings.append(Finding(
                                    check="determinism", kind="nondeterministic", spec=job.spec.id,  # type: ignore[union-attr]
                                    case=case.id, repro=repro,
                                    message=f"{why} (run {i + 2} of {repeats + 1}, {when}; case {case.describe()})"))
                                break
                        if findings:
                            break
                if findings:
                    break
        except Exception as exc:  # noqa: BLE001
            if is_fatal(exc):
                return Outcome(Status.FAILED, [Finding(check="determinism", kind="cuda-error", spec=job.spec.id,  # type: ignore[union-attr]
                                                       message=f"the kernel broke the CUDA context: {exc}")],
                               cases=ran, reason="CUDA context lost")
            if isinstance(exc, ContextLost):
                raise
            continue  # a refusal: the equivalence check reports it
        ran += 1
        if findings:
            break
    return Outcome(Status.FAILED if findings else Status.PASSED, findings, cases=ran)
