"""The speed check's statistics on synthetic timings (issue 44, part 2): interleaved pairs of the base's
and the head's times with multiplicative noise, a drift common to both and rare outliers, as a GPU's
timings come. A 5% slow-down is shown at the stated confidence; a change that does nothing is called
slower about as often as the confidence allows, and the interval covers the true ratio."""
from __future__ import annotations

import math
import random

import pytest

from gpu_gate.judge.speed import MIN_PAIRS, _rank_bound, _signed_rank_counts, compare


def timings(seed: int, slowdown: float, pairs: int = 30, noise: float = 0.03, outliers: float = 0.05
            ) -> tuple[list[float], list[float]]:
    """``pairs`` interleaved (base, head) times of a 1 ms kernel; the head ``slowdown`` slower."""
    rng = random.Random(seed)
    base, head = [], []
    for i in range(pairs):
        drift = 1 + 0.1 * i / pairs  # clocks settling: both sides of a pair alike

        def one(true: float) -> float:
            t = true * drift * math.exp(rng.gauss(0, noise))
            return t * 1.5 if rng.random() < outliers else t  # behind a context switch now and then

        base.append(one(1e-3))
        head.append(one(1e-3 * (1 + slowdown)))
    return base, head


def test_a_five_percent_slowdown_is_shown() -> None:
    runs = [compare(*timings(seed, 0.05)) for seed in range(200)]
    shown = sum(r.slower for r in runs)
    assert shown >= 0.95 * len(runs), shown
    assert not any(r.faster for r in runs)
    r = runs[0]
    assert 1.02 < r.ratio < 1.08 and r.low < r.ratio < r.high
    assert "slower" in r.describe() and "30 interleaved pairs" in r.describe()


def test_a_change_that_does_nothing_is_rarely_called_slower_or_faster() -> None:
    runs = [compare(*timings(seed, 0.0)) for seed in range(400)]
    slower, faster = sum(r.slower for r in runs), sum(r.faster for r in runs)
    # at 95%, about 2.5% each way; the bound leaves room for chance over 400 runs
    assert slower <= 0.05 * len(runs) and faster <= 0.05 * len(runs), (slower, faster)
    assert sum(r.low <= 1.0 <= r.high for r in runs) >= 0.92 * len(runs)
    assert "no change shown" in next(r for r in runs if not (r.slower or r.faster)).describe()


@pytest.mark.parametrize("true", [0.8, 1.0, 1.3])
def test_the_interval_covers_the_true_ratio_at_the_stated_confidence(true: float) -> None:
    runs = [compare(*timings(seed, true - 1, pairs=12, noise=0.08), confidence=0.9) for seed in range(400)]
    covered = sum(r.low <= true * 1.0000001 and true <= r.high * 1.0000001 for r in runs)
    assert covered >= 0.86 * len(runs), covered


def test_a_slowdown_beyond_the_threshold_blocks_and_one_within_it_does_not() -> None:
    big = compare(*timings(1, 0.25), threshold=0.10)
    small = compare(*timings(1, 0.05), threshold=0.10)
    assert big.beyond and "beyond the 10% allowed" in big.describe()
    assert small.slower and not small.beyond


def test_outliers_do_not_make_a_slowdown() -> None:
    """Two head timings behind a context switch (3x) in an otherwise equal run: a mean of the ratios
    would call it slower; the rank statistics do not."""
    base, head = timings(3, 0.0, outliers=0.0)
    head[4] *= 3
    head[17] *= 3
    mean_ratio = sum(h / b for b, h in zip(base, head)) / len(base)
    assert mean_ratio > 1.1
    r = compare(base, head)
    assert not r.slower and abs(r.ratio - 1) < 0.03


def test_the_signed_rank_bound_matches_the_tables() -> None:
    """n = 10 at 5% two-sided: the critical value is 8 (P(T <= 8) = 0.0244, P(T <= 9) = 0.0322)."""
    counts = _signed_rank_counts(10)
    assert sum(counts) == 2 ** 10 and counts[0] == 1 and counts[55] == 1
    assert abs(sum(counts[:9]) / 1024 - 0.0244) < 1e-3 and abs(sum(counts[:10]) / 1024 - 0.0322) < 1e-3
    assert _rank_bound(10, 0.05) == 8
    assert abs(_rank_bound(30, 0.05) - 137) <= 1  # exact; the normal approximation takes over just after
    assert abs(_rank_bound(31, 0.05) - _rank_bound(30, 0.05)) < 12


@pytest.mark.parametrize("base,head,why", [
    ([1.0] * 6, [1.0] * 5, "must come in pairs"),
    ([1.0] * (MIN_PAIRS - 1), [1.0] * (MIN_PAIRS - 1), "at least"),
    ([1.0] * 6, [1.0] * 5 + [0.0], "not a positive finite number"),
    ([1.0] * 6, [1.0] * 5 + [float("nan")], "not a positive finite number"),
    ([1.0] * 6, [1.0] * 5 + [-1.0], "not a positive finite number"),
])
def test_timings_that_cannot_be_compared_are_refused(base: list[float], head: list[float], why: str) -> None:
    """A timing that failed (0, NaN, negative) must not count as a fast run."""
    with pytest.raises(ValueError, match=why):
        compare(base, head)
