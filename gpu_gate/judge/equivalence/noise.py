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
SAMPLED_CASES = 3  # cases per output on which a new failure is sampled; later cases keep their one draw
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
    # an output whose new failure stood the sampling on SAMPLED_CASES cases already: the job is red for
    # it whatever this case's sampling says, which could only relabel this case
    outputs = [k for k in outputs if runner.noise_stood.get(k, 0) < SAMPLED_CASES]
    if not outputs:
        return findings
    sample = _sample(runner, case, m, upstream, truth, outputs, base_first, head_first)
    if sample is None:
        return findings
    out = []
    for f in findings:
        k = str(f.details.get("output"))
        varies = sample.base_varies.get(k) or len({base_first.get(k), *sample.base.get(k, [])}) > 1
        if _new_wrong(f) and k in outputs and varies:
            f = _judged(f, [head_first[k], *sample.head[k]], [base_first[k], *sample.base[k]])
        if _new_wrong(f) and k in outputs:
            runner.noise_stood[k] = runner.noise_stood.get(k, 0) + 1
        out.append(f)
    return out


def _new_wrong(f: Finding) -> bool:
    return f.severity is Severity.ERROR and f.details.get("change") == "new" and f.kind in WRONG


def _judged(f: Finding, head: list[float], base: list[float]) -> Finding:
    from .engine import marked

    spread = {"head_errors": [min(head), max(head)], "base_errors": [min(base), max(base)], "runs": len(head),
              "base_runs": len(base)}
    runs = (f"{len(head)} runs of each" if len(head) == len(base)
            else f"{len(base)} runs of the base's code and {len(head)} of this change's")
    said = (f"over {runs} on the same inputs, the base's code, whose results differ from run to "
            f"run here, is off by {min(base):.3g} to {max(base):.3g}, this change's by {min(head):.3g} to "
            f"{max(head):.3g}")
    f = dataclasses.replace(f, details={**f.details, **spread})
    if min(head) > max(base):
        return marked(f, "new", f"{said}: every run of the head is outside the base's range")
    return marked(dataclasses.replace(f, message=f"pre-existing (within the base's own run-to-run range: {said}): "
                                                 f"{f.message}"), "pre-existing",
                  f"{said}: within the base's range")


def _sample(runner: CaseRunner, case: Case, m: Materialized, upstream: Recipe | None, truth: Truth,
            outputs: list[str], base_first: dict[str, float] | None = None,
            head_first: dict[str, float] | None = None) -> Sample | None:
    """NOISE_RUNS more runs of the base's code and the head's on the case (None: a run failed, or
    the base was lost, which drops it as everywhere else). The base runs first: where its results
    never differ, the failure stays new whatever the head's runs say, and the head does not run
    again; the head's runs stop once each varying output has one within the base's range (the
    failure is then the base's debt, whatever the later runs say)."""
    from ..workers import BaseLost
    from .engine import ContextLost, bitwise_equal

    base_first, head_first = base_first or {}, head_first or {}
    errors: list[dict[str, list[float]]] = [{k: [] for k in outputs}, {k: [] for k in outputs}]
    varies = dict.fromkeys(outputs, False)
    for side, cand in ((1, runner.base), (0, runner.candidate)):
        if cand is None:
            return None
        seen: dict[str, object] = {}
        for _ in range(NOISE_RUNS):
            if side == 0 and _settled(errors, varies, base_first, head_first):
                break
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
        if side == 1:
            for k in outputs:  # errors that differ are results that differ, whatever the first run was
                varies[k] = varies[k] or len(set(errors[1][k])) > 1 \
                    or (k in base_first and len({base_first[k], *errors[1][k]}) > 1)
            if not any(varies.values()):
                break  # a deterministic base: its one draw is its distribution, the failures stay new
    return Sample(errors[0], errors[1], varies)


def _settled(errors: list[dict[str, list[float]]], varies: dict[str, bool], base_first: dict[str, float],
             head_first: dict[str, float]) -> bool:
    """Whether more runs of the head can change nothing: every output whose base varies has a head run
    (the first included) within the base's range, so no output can have every head run beyond it."""
    live = [k for k, v in varies.items() if v]
    if not live:
        return True
    for k in live:
        base = errors[1][k] + ([base_first[k]] if k in base_first else [])
        head = errors[0][k] + ([head_first[k]] if k in head_first else [])
        if not head or min(head) > max(base):
            return False
    return True


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
