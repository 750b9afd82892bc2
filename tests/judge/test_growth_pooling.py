"""The growth sweep's comparison with the base's code pools several draws at the longest length
when one draw leaves it close, so that a weak regression is not caught or missed by one draw's luck.

A stand-in case runner returns the errors each case would have: the head's, torch's and the base's,
chosen per draw. The real sweep (``growth.sweep``) runs on them."""
from __future__ import annotations

import time
from types import SimpleNamespace
from typing import Any

import gpu_gate as gg
from gpu_gate.judge.equivalence import growth
from gpu_gate.judge.equivalence.compare import Comparison

F32_EPS = 2.0 ** -23


def _spec() -> Any:
    @gg.spec(dims={"rows": gg.Dim(16, 16), "n": gg.Dim(1, 1 << 16, reduction=True)},
             inputs={"x": gg.Tensor(("rows", "n"), dtypes=["float32"], dists=["uniform_pos"])},
             reference=lambda x: x.sum(-1))
    def row_sum_pool_gate(x: Any) -> Any:
        return x.sum(-1)
    return row_sum_pool_gate


class Runner:
    """Errors in units of float32's epsilon: ``head(n, draw)``, ``base(n, draw)``; torch's is 1.4x the base's."""

    def __init__(self, head: Any, base: Any) -> None:
        self.head, self.base, self.ran = head, base, []

    def run(self, case: Any, sensitivity: bool = False) -> Any:
        n = case.dims["n"]
        draw = int(case.id.rpartition("-draw")[2]) if "-draw" in case.id else 0
        self.ran.append(case.id)
        h, b = self.head(n, draw) * F32_EPS, self.base(n, draw) * F32_EPS
        return SimpleNamespace(refused=False, unsupported=False, findings=[],
                               comparisons=[Comparison("out", True, "ok", "", error=h, baseline_error=1.4 * b)],
                               base_comparisons=[Comparison("out", True, "ok", "", error=b, baseline_error=1.4 * b)])


def _job() -> Any:
    return SimpleNamespace(seed=9, options={}, spec=SimpleNamespace(id="gate/rows_gate.py::row_sum_pool_gate"))


def _sweep(runner: Runner) -> Any:
    return growth.sweep(runner, _spec(), _job(), budget=1 << 30, bad_dtypes=frozenset(),
                        deadline=time.monotonic() + 60)


def test_a_weak_regression_one_unlucky_draw_puts_under_the_ratio_is_caught_on_the_pooled_draws() -> None:
    # flat at the base (a quarter epsilon: the output's rounding); the head grows, and its first draw at
    # the longest length happens to land at 1.3x the base's, its next ones at 2x
    runner = Runner(head=lambda n, d: 0.25 * (1.3 if d == 0 else 2.0) if n == 1 << 16 else 0.25,
                    base=lambda n, d: 0.25)
    out = _sweep(runner)
    (f,) = [f for f in out["findings"] if f.kind == "error-growth"]
    assert f.details["against"] == "base" and f.details["draws_at_longest"] == growth.GROWTH_DRAWS
    assert f"root mean square over {growth.GROWTH_DRAWS} draws" in f.message
    assert out["table"]["draws_at_longest"] == growth.GROWTH_DRAWS
    drawn = [c for c in runner.ran if "-draw" in c]
    assert len(drawn) == len(set(drawn)) == growth.GROWTH_DRAWS - 1, runner.ran


def test_one_lucky_draw_over_the_ratio_is_not_a_finding_when_the_other_draws_are_as_accurate_as_the_base() -> None:
    runner = Runner(head=lambda n, d: 0.25 * (1.6 if d == 0 and n == 1 << 16 else 1.0), base=lambda n, d: 0.25)
    out = _sweep(runner)
    assert not out["findings"], [f.message for f in out["findings"]]
    assert out["table"]["draws_at_longest"] == growth.GROWTH_DRAWS


def test_a_head_exactly_as_accurate_as_the_base_costs_no_extra_draw() -> None:
    runner = Runner(head=lambda n, d: 0.25 * (1 + n / 65536), base=lambda n, d: 0.25 * (1 + n / 65536))
    out = _sweep(runner)
    assert not out["findings"] and not any("-draw" in c for c in runner.ran)
    assert "draws_at_longest" not in out["table"]


def test_a_head_far_worse_than_the_base_is_decided_on_one_draw() -> None:
    runner = Runner(head=lambda n, d: 0.25 * (10.0 if n == 1 << 16 else 1.0), base=lambda n, d: 0.25)
    out = _sweep(runner)
    assert [f.kind for f in out["findings"]] == ["error-growth"]
    assert not any("-draw" in c for c in runner.ran)
