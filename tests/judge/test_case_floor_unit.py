"""The floor of cases and the two clocks, on plain schedules (no workers)."""
from __future__ import annotations

import gpu_gate as gg
from gpu_gate.judge.equivalence.floor import CPU_FLOOR, GPU_FLOOR, Clock, floor
from gpu_gate.protocol.cases import ScheduleOptions, schedule


def _spec():  # type: ignore[no-untyped-def]
    @gg.spec(dims={"rows": gg.Dim(1, 64), "n": gg.Dim(1, 256)},
             inputs={"x": gg.Tensor(("rows", "n"), dtypes=["float32", "float16", "bfloat16"])},
             reference=lambda x: x.sum(-1))
    def s(x):  # type: ignore[no-untyped-def]
        return x.sum(-1)
    return s


def test_the_floor_holds_every_dtype_and_layout_and_a_minimum() -> None:
    cases = schedule(_spec(), ScheduleOptions(cases=64, seed=3, dtypes=None, max_case_bytes=1 << 20))
    for device, least in (("cuda", GPU_FLOOR), ("cpu", CPU_FLOOR)):
        must = floor(cases, device)
        assert set(range(least)) <= must
        picked = [cases[i] for i in must]
        assert {c.inputs["x"].dtype for c in picked} == {c.inputs["x"].dtype for c in cases}
        assert {c.inputs["x"].layout for c in picked} == {c.inputs["x"].layout for c in cases}
        assert len(must) < len(cases)


def test_the_candidates_time_moves_the_deadline_up_to_its_own_budget() -> None:
    busy = [0.0]
    clock = Clock(own_s=10, candidate_s=30, hard=float("inf"), busy=lambda: busy[0], start=100.0)
    assert clock.deadline() == 110.0
    busy[0] = 20.0
    assert clock.deadline() == 130.0
    busy[0] = 500.0
    assert clock.deadline() == 140.0
    late = Clock(own_s=10, candidate_s=30, hard=120.0, busy=lambda: busy[0], start=100.0)
    busy[0] += 25.0
    assert late.deadline() == 120.0  # the job's own limit, whatever the candidate took
