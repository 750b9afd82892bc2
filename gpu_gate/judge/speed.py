"""The speed check's statistics: is the head's code slower than the base's, and by how much, from
timings taken in interleaved pairs (base, head, base, head, ...) on the same cases.

Timings on a GPU are noisy in ways a mean hides: clocks drift over a run, a repeat now and then lands
behind a context switch or a page fault and takes half as long again, and the noise is multiplicative.
So the comparison is made on the log of each pair's ratio (head over base, taken back to back, so a
drift common to both cancels) with rank statistics, which a few outliers cannot move:

- the estimate is the Hodges-Lehmann estimator of the log-ratios, the median of their Walsh averages
  (every mean of two of them, each with itself too), turned back into a ratio;
- its confidence interval is the distribution-free one of the Wilcoxon signed-rank test: between the
  k-th smallest and the k-th largest Walsh average, k taken from the signed-rank statistic's null
  distribution (exact up to 30 pairs, its normal approximation beyond). It covers the true ratio at the
  stated confidence when the pairs' log-ratios are symmetric about it, whatever their spread;
- ``slower`` when the whole interval is above 1 (a slow-down shown at that confidence), ``faster``
  when it is below; ``beyond`` when its lower end is above ``1 + threshold`` (the change is slower than
  the policy allows, at that confidence). A change that does nothing is called neither slower nor
  faster in about ``1 - confidence`` of runs, split between the two.

Pure Python: the judge computes it from the numbers the workers report, and the report only reads it.
"""
from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence
from statistics import NormalDist

EXACT_UP_TO = 30  # pairs; beyond, the signed-rank statistic's normal approximation
MIN_PAIRS = 6  # fewer pairs cannot show anything at 95%: the interval would be every Walsh average


@dataclasses.dataclass(frozen=True)
class SpeedComparison:
    """The head's time over the base's on the same cases: ``ratio`` (above 1: slower) and its
    confidence interval ``[low, high]``."""
    ratio: float
    low: float
    high: float
    pairs: int
    confidence: float
    threshold: float

    @property
    def slower(self) -> bool:
        return self.low > 1.0

    @property
    def faster(self) -> bool:
        return self.high < 1.0

    @property
    def beyond(self) -> bool:
        """Slower than the threshold allows, at the stated confidence."""
        return self.low > 1.0 + self.threshold

    def describe(self) -> str:
        change = f"{(self.ratio - 1) * 100:+.1f}%"
        verdict = ("slower" if self.slower else "faster" if self.faster else "no change shown")
        return (f"head/base time {self.ratio:.3f} ({change}; {self.confidence:.0%} interval "
                f"{self.low:.3f}-{self.high:.3f}, {self.pairs} interleaved pairs): {verdict}"
                + (f", beyond the {self.threshold:.0%} allowed" if self.beyond else ""))


def compare(base: Sequence[float], head: Sequence[float], *, confidence: float = 0.95,
            threshold: float = 0.05) -> SpeedComparison:
    """``base[i]`` and ``head[i]``: the i-th interleaved pair's times (seconds, any unit, the same for
    both). Raises ValueError on fewer than :data:`MIN_PAIRS` pairs, unequal lengths, or a time that is
    not a positive finite number (a timing that failed must not count as fast)."""
    if len(base) != len(head):
        raise ValueError(f"{len(base)} base timings and {len(head)} head timings: they must come in pairs")
    if len(base) < MIN_PAIRS:
        raise ValueError(f"{len(base)} pairs of timings: at least {MIN_PAIRS} are needed")
    if not 0.5 < confidence < 1:
        raise ValueError(f"confidence {confidence}: it must be between 0.5 and 1")
    for t in (*base, *head):
        if not (isinstance(t, (int, float)) and math.isfinite(t) and t > 0):
            raise ValueError(f"timing {t!r} is not a positive finite number")
    logs = [math.log(h / b) for b, h in zip(base, head)]
    walsh = sorted((logs[i] + logs[j]) / 2 for i in range(len(logs)) for j in range(i, len(logs)))
    k = _rank_bound(len(logs), 1 - confidence)
    m = len(walsh)
    mid = (walsh[(m - 1) // 2] + walsh[m // 2]) / 2
    return SpeedComparison(ratio=math.exp(mid), low=math.exp(walsh[k]), high=math.exp(walsh[m - 1 - k]),
                           pairs=len(logs), confidence=confidence, threshold=threshold)


def _rank_bound(n: int, alpha: float) -> int:
    """The 0-based index k of the interval's ends among the M sorted Walsh averages: the largest k with
    P(T <= k) <= alpha / 2 for the signed-rank statistic T of n pairs under no change (the interval
    [W_k, W_{M-1-k}] then covers at least 1 - alpha); 0 where no k is that small."""
    m = n * (n + 1) // 2
    if n <= EXACT_UP_TO:
        counts = _signed_rank_counts(n)
        total = 2 ** n
        k, below = -1, 0
        while k + 1 < m // 2 and (below + counts[k + 1]) / total <= alpha / 2:
            k += 1
            below += counts[k]
        return max(0, k)
    z = NormalDist().inv_cdf(1 - alpha / 2)
    # P(T <= t) ~ Phi((t + 0.5 - M/2) / sd): the largest t with that at most alpha / 2
    k = math.floor(m / 2 - 0.5 - z * math.sqrt(n * (n + 1) * (2 * n + 1) / 24))
    return max(0, min(k, (m - 1) // 2))


def _signed_rank_counts(n: int) -> list[int]:
    """How many of the 2**n sign patterns give each value 0..n(n+1)/2 of the signed-rank statistic."""
    counts = [1] + [0] * (n * (n + 1) // 2)
    for r in range(1, n + 1):
        for s in range(len(counts) - 1, r - 1, -1):
            counts[s] += counts[s - r]
    return counts
