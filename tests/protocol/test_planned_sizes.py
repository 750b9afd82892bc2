"""Planned sizes: both sides of each size threshold read from the wrapper, jointly for the dims a
condition combines and within the case budget, and the joint corners of the dims."""
from __future__ import annotations

import gpu_gate as gg
from gpu_gate.protocol.cases import ScheduleOptions, case_bytes, planned_sizes, schedule_and_skipped
from gpu_gate.protocol.shapes import Atom, Threshold

MiB = 1 << 20


def _spec(rows_reduction: bool = False) -> object:
    @gg.spec(dims={"rows": gg.Dim(1, 1 << 17, reduction=rows_reduction), "hidden": gg.Dim(1, 16384)},
             inputs={"x": gg.Tensor(("rows", "hidden"), dtypes=["float32"])}, reference=lambda x: x)
    def s(x):  # noqa: ANN001, ANN202
        return x

    return s


def _t(*conjunctions: tuple[Atom, ...], where: str = "lib.py:3") -> Threshold:
    return Threshold(where, "the condition", tuple(conjunctions))


ROWS = ("dim", "rows")
HIDDEN = ("dim", "hidden")
MANY_NARROW = _t((Atom(ROWS, ">=", 100000), Atom(HIDDEN, "<=", 4)))


def _plan(spec: object, *thresholds: Threshold, budget: int = 64 * MiB) -> tuple[list, list]:  # type: ignore[type-arg]
    opts = ScheduleOptions(cases=24, seed=0, dtypes=None, max_case_bytes=budget, thresholds=thresholds)
    return planned_sizes(spec, opts, ["float32"])  # type: ignore[arg-type]


def test_a_condition_on_two_dims_is_run_inside_and_just_across_each_boundary() -> None:
    plan, skipped = _plan(_spec(), MANY_NARROW)
    sides = {why: dims for dims, why in plan if why.startswith(("inside", "outside"))}
    assert sides == {
        "inside lib.py:3 `the condition`: rows >= 100000 and hidden <= 4": {"rows": 100000, "hidden": 4},
        "outside lib.py:3 `the condition`: rows < 100000 with hidden <= 4": {"rows": 99999, "hidden": 4},
        "outside lib.py:3 `the condition`: hidden > 4 with rows >= 100000": {"rows": 100000, "hidden": 5},
    }
    assert skipped == []


def test_a_side_too_large_for_the_budget_shrinks_without_crossing_or_says_why() -> None:
    """rows >= 100000 with hidden <= 256 at the boundary is 100000 x 256: over 64 MiB. Inside, the
    narrow dim shrinks (it stays <= 256); just across (257) it cannot, and says so."""
    spec = _spec()
    plan, skipped = _plan(spec, _t((Atom(ROWS, ">=", 100000), Atom(HIDDEN, "<=", 256))))
    inside = [dims for dims, why in plan if why.startswith("inside")]
    assert inside and inside[0]["rows"] == 100000 and inside[0]["hidden"] <= 256
    for dims, _ in plan:
        assert case_bytes(spec, dims, {"x": gg_choice()}) <= 64 * MiB  # type: ignore[arg-type]
    assert any("hidden > 256" in s and "fits the case budget" in s for s in skipped), skipped


def gg_choice():  # type: ignore[no-untyped-def]
    from gpu_gate.protocol.cases import InputChoice

    return InputChoice("float32", "normal", "contiguous")


def test_a_block_size_threshold_is_crossed_where_the_power_of_two_changes() -> None:
    plan, _ = _plan(_spec(), _t((Atom(("call", "next_power_of_2", HIDDEN), ">", 8192),)))
    sides = sorted(dims["hidden"] for dims, why in plan if "next_power_of_2" in why)
    assert sides == [8192, 8193]


def test_a_product_threshold_and_an_or() -> None:
    product = _t((Atom(("*", ROWS, HIDDEN), ">", float(1 << 20)),), where="lib.py:9")
    either = _t((Atom(ROWS, ">", 5000),), (Atom(HIDDEN, ">", 3000),), where="lib.py:12")
    plan, _ = _plan(_spec(), product, either)
    for dims, why in plan:
        if why.startswith("inside lib.py:9"):
            assert dims["rows"] * dims["hidden"] > 1 << 20
        if why.startswith("outside lib.py:9"):
            assert dims["rows"] * dims["hidden"] <= 1 << 20
    whys = [why for _, why in plan if "lib.py:12" in why]
    assert any("rows > 5000" in w for w in whys) and any("hidden > 3000" in w for w in whys)


def test_the_joint_corners_are_swept_without_any_threshold() -> None:
    plan, _ = _plan(_spec(rows_reduction=True))
    corners = {why: dims for dims, why in plan}
    long = corners["corner: reduction 'rows' longest, the other dims smallest"]
    assert long == {"rows": 1 << 17, "hidden": 1}
    wide = corners["corner: reduction 'rows' shortest, the other dims largest"]
    assert wide["rows"] == 1 and wide["hidden"] == 16384
    plan, _ = _plan(_spec())
    assert {why for _, why in plan} == {"corner: dim 'rows' longest, the other dims smallest",
                                        "corner: dim 'hidden' longest, the other dims smallest"}


def test_the_schedule_runs_the_planned_sizes_after_the_extremes_and_says_why() -> None:
    spec = _spec()
    opts = ScheduleOptions(cases=24, seed=3, dtypes=None, max_case_bytes=64 * MiB, thresholds=(MANY_NARROW,))
    cases, skipped = schedule_and_skipped(spec, opts)  # type: ignore[arg-type]
    assert len(cases) == 24 and skipped == []
    planned = [c for c in cases if c.why]
    assert [c.why.split(" `")[0] for c in planned[:3]] == ["inside lib.py:3", "outside lib.py:3", "outside lib.py:3"]
    first = cases.index(planned[0])
    assert first > 5, "the extremes come first"
    for c in planned:
        assert c.id.startswith("b") and c.inputs["x"].dist == "normal" and c.inputs["x"].layout == "contiguous"
        assert c.why in c.describe()
    off = ScheduleOptions(cases=24, seed=3, dtypes=None, max_case_bytes=64 * MiB, thresholds=(MANY_NARROW,),
                          plan=False)
    assert not [c for c in schedule_and_skipped(spec, off)[0] if c.why]  # type: ignore[arg-type]
