"""The speed check on a GPU (issue 44, part 2): a Triton kernel at the base and at the head, timed on
the same cases with CUDA events, fresh input buffers and the L2 cache flushed before each run. A head
whose wrapper launches the kernel four times is red with its interval (on an H200: 1.96x, interval
1.94-2.02; the later launches find their data in L2); the same kernel, changed by a
token only, is green, with its figures in the report. Prints both notes (-s)."""
from __future__ import annotations

from pathlib import Path

import pytest
from test_differential_gpu import KERNEL, POLICY, _gate

pytestmark = pytest.mark.gpu

SPEED_POLICY = POLICY.replace("  equivalence: {cases: 12, growth: false, shrink: false}\n",
                              "  equivalence: off\n  speed: required\n")
FOUR_TIMES = KERNEL.replace("    _scale_rows[(x.shape[0],)](x, y, n_cols, x.stride(0), BLOCK=triton.next_power_of_2(n_cols))",
                            "    for _ in range(4):\n"
                            "        _scale_rows[(x.shape[0],)](x, y, n_cols, x.stride(0), BLOCK=triton.next_power_of_2(n_cols))")


def _speed(findings: list[dict]) -> dict[str, dict]:  # type: ignore[type-arg]
    return {f["kind"]: f for f in findings if f["check"] == "speed"}


def test_a_kernel_launched_four_times_is_slower_with_its_interval(tmp_path: Path) -> None:
    assert FOUR_TIMES != KERNEL
    code, text, findings = _gate(tmp_path, KERNEL, FOUR_TIMES, policy=SPEED_POLICY)
    got = _speed(findings)
    print("\n" + got.get("speed", {}).get("message", text))
    assert code == 1, text
    d = got["slower"]["details"]
    assert d["low"] > 1.5 and d["ratio"] < 6.0, d  # 1.96 on an H200 (the later launches find the data in L2)
    assert "cuda-events" in got["speed"]["message"] and "L2 flushed" in got["speed"]["message"]


def test_the_same_kernel_is_not_slower(tmp_path: Path) -> None:
    code, text, findings = _gate(tmp_path, KERNEL, KERNEL, policy=SPEED_POLICY)
    got = _speed(findings)
    print("\n" + got.get("speed", {}).get("message", text))
    assert code == 0, text
    assert set(got) == {"speed"}, got
    d = got["speed"]["details"]
    assert 0.9 < d["ratio"] < 1.1 and d["low"] <= 1.05, d
    assert "### Speed: this change against the base" in text
