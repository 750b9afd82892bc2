"""The noise-aware differential (issue 40, part 2): one draw of a nondeterministic kernel is not
its accuracy. Where the head's code fails a case on wrong values and the base's code passed it
once, both run the case again (NOISE_RUNS times each, the same inputs, against the same truth);
where the base's code gives other results from run to run there, the failure is classified on
the distributions: new only where every run of the head is further off than every run of the
base (outside the base's observed range), otherwise the repository's debt (the base's code is as
far off on some of its runs). A base whose runs agree bitwise is deterministic there: its one
draw is its distribution, and the failure stays new.

Measured on an H200: a kernel with fp16 partial sums and atomics, comment-only pull request, red
in one of two runs, its 3-element gradient outside tolerance at the head and inside at the base."""
from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING

from ...findings import Finding, Severity

if TYPE_CHECKING:
    from ...protocol.cases import Case
    from ...protocol.inputs import Materialized
    from ..reference import Recipe
    from .engine import CaseRunner, Truth

__all__ = ["NOISE_RUNS", "Sample", "against_noise", "replayed_against_noise"]

# More runs of each side on a case where the head fails and the base passed once. With n runs a side
# (the first included), two sides that differ only by chance put every head run beyond every base run
# with probability 1/C(2n, n): 1 in 252 at n = 5, which a CI run of a comment-only pull request met on a
# random-order float16 sum; 1 in 48620 at n = 9. The runs are on the few cases that fail this way.
NOISE_RUNS = 8
WRONG = frozenset({"mismatch", "nan", "nonfinite"})


@dataclasses.dataclass
class Sample:
    """Per output: each side's errors over its runs, and whether its results differed between runs."""

    head: dict[str, list[float]]
    base: dict[str, list[float]]
    base_varies: dict[str, bool]


def against_noise(runner: CaseRunner, case: Case, m: Materialized, upstream: Recipe | None, truth: Truth,
                  findings: list[Finding], head_first: dict[str, float], base_first: dict[str, float]
                  ) -> list[Finding]:
    """``findings`` with each new wrong-values failure reclassified on the two sides' runs (see the
    module's doc); ``head_first``/``base_first``: each side's first run's error per output."""
    outputs = sorted({str(f.details.get("output")) for f in findings if _new_wrong(f)} & set(base_first))
    if not outputs:
        return findings
    sample = _sample(runner, case, m, upstream, truth, outputs)
    if sample is None:
        return findings
    out = []
    for f in findings:
        k = str(f.details.get("output"))
        varies = sample.base_varies.get(k) or len({base_first.get(k), *sample.base.get(k, [])}) > 1
        if _new_wrong(f) and k in outputs and varies:
            f = _judged(f, [head_first[k], *sample.head[k]], [base_first[k], *sample.base[k]])
        out.append(f)
    return out


def _new_wrong(f: Finding) -> bool:
    return f.severity is Severity.ERROR and f.details.get("change") == "new" and f.kind in WRONG


def _judged(f: Finding, head: list[float], base: list[float]) -> Finding:
    from .engine import marked

    spread = {"head_errors": [min(head), max(head)], "base_errors": [min(base), max(base)], "runs": len(head)}
    said = (f"over {len(head)} runs of each on the same inputs, the base's code, whose results differ from run to "
            f"run here, is off by {min(base):.3g} to {max(base):.3g}, this change's by {min(head):.3g} to "
            f"{max(head):.3g}")
    f = dataclasses.replace(f, details={**f.details, **spread})
    if min(head) > max(base):
        return marked(f, "new", f"{said}: every run of the head is outside the base's range")
    return marked(dataclasses.replace(f, message=f"pre-existing (within the base's own run-to-run range: {said}): "
                                                 f"{f.message}"), "pre-existing",
                  f"{said}: within the base's range")


def _sample(runner: CaseRunner, case: Case, m: Materialized, upstream: Recipe | None, truth: Truth,
            outputs: list[str]) -> Sample | None:
    """NOISE_RUNS more runs of the head's code and the base's on the case (None: a run failed, or
    the base was lost, which drops it as everywhere else)."""
    from ..workers import BaseLost
    from .engine import ContextLost, bitwise_equal

    errors: list[dict[str, list[float]]] = [{k: [] for k in outputs}, {k: [] for k in outputs}]
    varies = dict.fromkeys(outputs, False)
    for side, cand in enumerate((runner.candidate, runner.base)):
        if cand is None:
            return None
        seen: dict[str, object] = {}
        for _ in range(NOISE_RUNS):
            try:
                try:
                    rep = cand.call(case, upstream, inputs=m)
                finally:
                    cand.release()
            except (BaseLost, ContextLost) as exc:
                if side == 0:
                    raise
                runner.base, runner.base_lost = None, f"{exc} (case {case.id})"
                return None
            if rep.status != "ok" or any(k not in rep.outputs for k in outputs):
                return None
            for k in outputs:
                errors[side][k].append(runner._compare(case, k, rep.outputs, truth).error)
                if side == 1:
                    if k in seen and not bitwise_equal(seen[k], rep.outputs[k]):
                        varies[k] = True
                    seen.setdefault(k, rep.outputs[k])
    for k in outputs:  # errors that differ are results that differ, whatever the first run was
        varies[k] = varies[k] or len(set(errors[1][k])) > 1
    return Sample(errors[0], errors[1], varies)


def replayed_against_noise(runner: CaseRunner, case: Case, found: list[Finding]) -> list[Finding]:
    """The replay's failures of the head that the base's one replay did not have, looked for on
    NOISE_RUNS more replays of the base's code: a base that fails the same way on one of them is
    nondeterministic there, and the head's failure on one draw is its debt, not this change's."""
    from ..workers import BaseLost
    from .engine import ContextLost, failure_key, marked

    wanted = {failure_key(f) for f in found if f.details.get("change") == "new"}
    seen: set[tuple[str, str]] = set()
    runs = 0
    while wanted - seen and runs < NOISE_RUNS and runner.base is not None:
        runs += 1
        try:
            seen |= {failure_key(f) for f in runner._replay_on(runner.base, case)}
        except (BaseLost, ContextLost) as exc:
            runner.base, runner.base_lost = None, f"{exc} (replay of case {case.id})"
            break
    note = (f"the base's code fails the same way on one of {1 + runs} replays of the case: its results vary from "
            f"run to run here")
    return [marked(dataclasses.replace(f, message=f"pre-existing ({note}): {f.message}"), "pre-existing", note)
            if f.details.get("change") == "new" and failure_key(f) in seen else f for f in found]
