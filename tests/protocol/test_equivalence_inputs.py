"""Input generation: every axis of the schedule is exercised and recorded in the case, the
values follow their distribution, the layouts have the strides they claim, and the policy
and the spec narrow or widen each axis."""
from __future__ import annotations

import math
import random

import pytest
import torch

import gpu_gate as gg
from gpu_gate.protocol.cases import (
    DEFAULT_FLOAT_DISTS,
    Case,
    InputChoice,
    ScheduleOptions,
    case_bytes,
    growth_sizes,
    schedule,
    special_sizes,
)
from gpu_gate.worker.calling import grad_tensor, upstream_from_recipe, upstream_recipe
from gpu_gate.protocol.inputs import materialize, perturbed_inputs
from gpu_gate.errors import SpecError
from gpu_gate.spec import FLOAT_DTYPES, INDEX_DISTS, LAYOUTS

BUDGET = 64 << 20


def _spec(dtypes: tuple[str, ...] = ("float32", "float16", "bfloat16", "float64"), **tensor_kw: object) -> object:
    @gg.spec(dims={"rows": gg.Dim(1, 4096), "n": gg.Dim(1, 1 << 20, reduction=True), "vocab": gg.Dim(1, 1000)},
             inputs={"x": gg.Tensor(("rows", "n"), dtypes=list(dtypes), **tensor_kw),
                     "ids": gg.Index(("rows",), high="vocab")},
             reference=lambda x, ids: x.sum(-1))
    def fuzzed(x, ids):  # noqa: ANN001, ANN202
        return x.sum(-1)

    return fuzzed


def _opts(cases: int = 64, **kw: object) -> ScheduleOptions:
    return ScheduleOptions(cases=cases, seed=7, dtypes=None, max_case_bytes=BUDGET, **kw)  # type: ignore[arg-type]


def test_the_schedule_exercises_every_axis_and_records_it() -> None:
    cases = schedule(_spec(), _opts())
    ns = {c.dims["n"] for c in cases}
    rows = {c.dims["rows"] for c in cases}
    assert 1 in rows | ns
    assert any(n in (3, 5, 7, 13, 31, 61, 97, 127, 251, 509, 1021, 2039, 4093) for n in ns | rows), "a prime"
    assert any(n > 2 and ((n - 1) & (n - 2) == 0 or (n + 1) & n == 0) for n in ns), "a power of two +- 1"
    assert any(n % 128 and n > 128 for n in ns), "a non-multiple of a block size"
    assert max(ns) >= 1 << 18, "a long reduction"
    x = [c.inputs["x"] for c in cases]
    assert {i.dtype for i in x} == {"float32", "float16", "bfloat16", "float64"}
    assert {i.dist for i in x} == set(DEFAULT_FLOAT_DISTS)
    assert {i.layout for i in x} == set(LAYOUTS)
    assert {c.inputs["ids"].dist for c in cases} == set(INDEX_DISTS)
    assert {c.grad_layout for c in cases} == {"contiguous"}  # no grads: no upstream gradient to lay out
    assert cases[0].id == "c0000" and cases[0].inputs["x"] == InputChoice("float32", "normal", "contiguous")
    for c in cases:
        assert case_bytes(_spec(), c.dims, c.inputs) <= BUDGET
        assert Case.from_token(c.token()) == c  # a case is fully recorded in its token


def test_the_long_reduction_is_kept_and_the_other_dims_shrink_to_fit_the_budget() -> None:
    long = [c for c in schedule(_spec(("float32",)), _opts()) if c.dims["n"] >= 1 << 18]
    assert long and all(c.dims["rows"] <= 64 for c in long)


def test_sizes_are_the_ones_that_break_kernels() -> None:
    sizes = special_sizes(gg.Dim(1, 1 << 18, reduction=True), long=True)
    assert {1, 2, 3, 127, 129, 255, 257, 1000, 4093, 1 << 18} <= set(sizes)
    assert special_sizes(gg.Dim(8, 64, multiple_of=8), long=False) == [8, 16, 24, 32, 56, 64] or \
        all(s % 8 == 0 and 8 <= s <= 64 for s in special_sizes(gg.Dim(8, 64, multiple_of=8), long=False))
    assert growth_sizes(gg.Dim(1, 1 << 20)) == [256, 1024, 4096, 16384, 65536, 262144]


def test_float8_dtypes_are_scheduled_and_built_where_torch_has_them() -> None:
    spec = _spec(("float8_e4m3fn", "float8_e5m2"))
    cases = schedule(spec, _opts(8))
    assert {c.inputs["x"].dtype for c in cases} == {"float8_e4m3fn", "float8_e5m2"}
    for c in cases[:4]:
        x = materialize(spec, c, "cpu").tensors["x"]
        assert str(x.dtype) == f"torch.{c.inputs['x'].dtype}"
        finite = torch.isfinite(x.float())
        assert finite.all(), "values saturate to the dtype's range instead of overflowing"
    assert set(FLOAT_DTYPES) >= {"float8_e4m3fn", "float8_e5m2"}


def _materialize_x(dist: str, dtype: str = "float32", shape: tuple[int, int] = (8, 300), param: float = 0.0,
                   layout: str = "contiguous") -> torch.Tensor:
    spec = _spec((dtype,))
    case = Case("t", 11, {"rows": shape[0], "n": shape[1], "vocab": 100},
                {"x": InputChoice(dtype, dist, layout, param), "ids": InputChoice("int64", "uniform", "contiguous")})
    return materialize(spec, case, "cpu").tensors["x"]


@pytest.mark.parametrize("dist", DEFAULT_FLOAT_DISTS + ("neg_inf_spans",))
def test_no_distribution_is_zeros_alone(dist: str) -> None:
    x = _materialize_x(dist, param=20.0 if dist == "peaked" else 8.0)
    finite = x[torch.isfinite(x)]
    assert finite.numel() and finite.abs().max() > 0 and finite.unique().numel() > 2


def test_distributions_have_their_shape() -> None:
    assert (_materialize_x("uniform_pos") > 0).all()
    off = _materialize_x("offset", param=1000.0)
    assert abs(off.mean().item() - 1000) < 1 and off.std().item() < 2
    heavy = _materialize_x("heavy_tail")
    assert heavy.abs().max() > 20 * heavy.abs().median()
    peaked = _materialize_x("peaked", param=20.0)
    assert torch.allclose(peaked.max(-1).values[0::2], torch.tensor(20.0)) and \
        torch.allclose(peaked.max(-1).values[1::2], torch.tensor(8.0))
    ties = _materialize_x("ties")
    assert ties.unique().numel() <= 7
    den = _materialize_x("denormal", dtype="float16")
    tiny = torch.finfo(torch.float16).tiny
    assert ((den != 0) & (den.abs() < tiny)).any()
    spans = _materialize_x("neg_inf_spans")
    assert (torch.isneginf(spans).all(-1)).sum() == 1, "exactly one row is -inf throughout"
    assert torch.isneginf(spans).any(-1).float().mean() > 0.5, "most rows have a span of -inf"


def _ids(dist: str, n: int = 4096, high: int = 512) -> torch.Tensor:
    spec = _spec(("float32",))
    case = Case("t", 5, {"rows": n, "n": 1, "vocab": high},
                {"x": InputChoice("float32", "normal", "contiguous"), "ids": InputChoice("int64", dist, "contiguous")})
    return materialize(spec, case, "cpu").tensors["ids"]


def test_index_distributions() -> None:
    uni, zipf, same, srt = (_ids(d) for d in ("uniform", "zipf", "same", "sorted"))
    for ids in (uni, zipf, same, srt):
        assert ids.min() >= 0 and ids.max() < 512
    assert torch.bincount(zipf).max() > 10 * torch.bincount(uni).max(), "Zipf has hot ids"
    assert same.unique().numel() == 1
    assert (srt[1:] >= srt[:-1]).all()


@pytest.mark.parametrize(("layout", "check"), [
    ("contiguous", lambda t: t.is_contiguous()),
    ("transposed", lambda t: t.stride(-1) != 1 and t.stride(-2) == 1),
    ("sliced", lambda t: t.stride(-1) == 2),
    ("narrowed", lambda t: t.stride(-1) == 1 and t.stride(0) > t.shape[1]),
    ("expanded", lambda t: t.stride(0) == 0 and (t == t[0]).all()),
    ("offset", lambda t: t.is_contiguous() and t.data_ptr() % 64 != 0),
])
def test_layouts_have_the_strides_they_claim(layout: str, check: object) -> None:
    x = _materialize_x("normal", shape=(6, 40), layout=layout)
    assert x.shape == (6, 40) and check(x)  # type: ignore[operator]


def test_materialize_is_deterministic_and_fresh() -> None:
    a, b = _materialize_x("normal"), _materialize_x("normal")
    assert torch.equal(a, b) and a.data_ptr() != b.data_ptr()


def test_the_upstream_gradient_is_random_and_sometimes_strided() -> None:
    outs = {"out": torch.zeros(5, 7, dtype=torch.float64), "idx": torch.zeros(3, dtype=torch.int64)}
    up = upstream_from_recipe(upstream_recipe(outs, seed=3), "cpu")
    assert set(up) == {"out"}, "only float outputs get a gradient"
    g = up["out"]
    assert not torch.all(g == 1) and g.unique().numel() == 35
    strided = grad_tensor(g, torch.bfloat16, "strided")
    assert strided.dtype == torch.bfloat16 and not strided.is_contiguous()
    one_d = grad_tensor(g[0], torch.float32, "strided")
    assert one_d.stride() == (2,) and torch.equal(one_d, g[0].float())


def test_an_upstream_gradient_crosses_as_its_recipe_and_any_process_makes_the_same_values() -> None:
    """Its shape and seed cross as JSON instead of its float64 values: the reference worker's
    values, the candidate's and the base's are the same, made from the recipe in each process."""
    import json
    import subprocess
    import sys

    outs = {"out": torch.zeros(6, 4, dtype=torch.bfloat16), "n": torch.zeros(2, dtype=torch.int32)}
    recipe = upstream_recipe(outs, seed=11, expanded=False)
    assert json.loads(json.dumps(recipe)) == recipe and set(recipe) == {"out"}
    here = upstream_from_recipe(recipe, "cpu")["out"]
    assert here.dtype == torch.float64 and here.shape == (6, 4)
    code = ("import json, sys, torch; from gpu_gate.worker.calling import upstream_from_recipe; "
            "g = upstream_from_recipe(json.loads(sys.argv[1]), 'cpu')['out']; print(json.dumps(g.tolist()))")
    there = subprocess.run([sys.executable, "-c", code, json.dumps(recipe)], capture_output=True, text=True,
                           check=True).stdout
    assert torch.equal(torch.tensor(json.loads(there), dtype=torch.float64), here)
    other = upstream_from_recipe(upstream_recipe(outs, seed=12), "cpu")["out"]
    assert not torch.equal(other, here), "another case's seed makes other values"
    expanded = upstream_from_recipe(upstream_recipe(outs, seed=11, expanded=True), "cpu")["out"]
    assert torch.equal(expanded[0], expanded[5]) and torch.equal(expanded[0], here[0])


def test_perturbed_inputs_move_by_up_to_one_fp32_ulp() -> None:
    spec = _spec(("float32",))
    case = Case("t", 1, {"rows": 4, "n": 64, "vocab": 9},
                {"x": InputChoice("float32", "offset", "contiguous", 1000.0),
                 "ids": InputChoice("int64", "uniform", "contiguous")})
    m = materialize(spec, case, "cpu")
    p = perturbed_inputs(spec, m, 1)
    x = m.tensors["x"].double()
    rms = x.pow(2).mean(-1, keepdim=True).sqrt()
    moved = (p["x"] - x).abs() / torch.maximum(x.abs(), rms)
    assert 0 < moved.max() <= 2.0**-23 and moved.mean() > 2.0**-26
    assert torch.equal(p["ids"], m.tensors["ids"]), "indices are never perturbed"


def test_the_policy_narrows_and_the_spec_pins() -> None:
    spec = _spec()
    narrow = schedule(spec, _opts(32, dists=("normal", "offset"), layouts=("contiguous", "transposed"),
                                  index_dists=("zipf",)))
    assert {c.inputs["x"].dist for c in narrow} == {"normal", "offset"}
    assert {c.inputs["x"].layout for c in narrow} <= {"contiguous", "transposed"}
    assert {c.inputs["ids"].dist for c in narrow[1:]} == {"zipf"}
    widened = schedule(spec, _opts(32, dists=("neg_inf_spans", "normal")))
    assert "neg_inf_spans" in {c.inputs["x"].dist for c in widened}, "the policy may widen the default list"
    pinned = schedule(_spec(dists=["ties", "peaked"]), _opts(32, dists=("normal",)))
    assert {c.inputs["x"].dist for c in pinned} <= {"ties", "peaked"}, "a spec's own list is only narrowed"
    only16 = schedule(spec, ScheduleOptions(cases=8, seed=1, dtypes=("float16",), max_case_bytes=BUDGET))
    assert {c.inputs["x"].dtype for c in only16} == {"float16"}
    shorter = schedule(spec, _opts(32, max_reduction=1 << 14))
    assert max(c.dims["n"] for c in shorter) <= (1 << 14) + 1


def test_unsupported_dtypes_are_dropped() -> None:
    cases = schedule(_spec(("bfloat16", "float32")), _opts(8, unsupported_dtypes=frozenset({"bfloat16"})))
    assert {c.inputs["x"].dtype for c in cases} == {"float32"}
    assert schedule(_spec(("bfloat16",)), _opts(8, unsupported_dtypes=frozenset({"bfloat16"}))) == []


def test_seeds_differ_between_cases_and_runs() -> None:
    a = schedule(_spec(), _opts(16))
    b = schedule(_spec(), ScheduleOptions(cases=16, seed=8, dtypes=None, max_case_bytes=BUDGET))
    assert len({c.seed for c in a}) == 16 and {c.seed for c in a}.isdisjoint({c.seed for c in b})
    random.seed(0)
    assert math.isfinite(sum(c.seed for c in a))


def _grad_spec() -> object:
    @gg.spec(dims={"rows": gg.Dim(1, 64), "n": gg.Dim(1, 4096, reduction=True)},
             inputs={"x": gg.Tensor(("rows", "n"))}, reference=lambda x: x * 2, grads=["x"])
    def doubled(x):  # noqa: ANN001, ANN202
        return x * 2

    return doubled


def test_a_strided_and_an_expanded_upstream_gradient_come_among_the_first_cases() -> None:
    for seed in range(5):
        opts = ScheduleOptions(cases=4, seed=seed, dtypes=None, max_case_bytes=BUDGET)
        layouts = [c.grad_layout for c in schedule(_grad_spec(), opts)]  # type: ignore[arg-type]
        assert layouts[0] == "contiguous" and {"strided", "expanded"} <= set(layouts), layouts


def test_an_expanded_upstream_gradient_has_stride_0_and_the_reference_sees_the_same_values() -> None:
    from gpu_gate.worker.calling import expanded_values

    values = expanded_values(upstream_from_recipe(upstream_recipe({"out": torch.zeros(5, 3)}, seed=1), "cpu"))["out"]
    g = grad_tensor(values, torch.float32, "expanded")
    assert g.stride() == (0, 1) and torch.equal(g, values.float())
    assert torch.equal(values[0], values[4]) and not torch.equal(values[0], torch.zeros(3, dtype=torch.float64))


def _ce_spec(**index_kw: object) -> object:
    @gg.spec(dims={"rows": gg.Dim(1, 64), "classes": gg.Dim(2, 4096)},
             inputs={"logits": gg.Tensor(("rows", "classes")),
                     "labels": gg.Index(("rows",), high="classes", **index_kw)},  # type: ignore[arg-type]
             reference=lambda logits, labels: torch.nn.functional.cross_entropy(logits, labels))
    def ce(logits, labels):  # noqa: ANN001, ANN202
        return torch.nn.functional.cross_entropy(logits, labels)

    return ce


def test_logits_peak_at_the_label_with_the_swept_probability() -> None:
    from gpu_gate.protocol.cases import PEAK_MARGINS

    spec = _ce_spec(peak_of="logits")
    cases = schedule(spec, _opts(cases=12))  # type: ignore[arg-type]
    margins = [c.inputs["labels"].param for c in cases]
    assert set(PEAK_MARGINS) <= set(margins)
    for c in cases[:9]:
        if c.inputs["logits"].layout == "expanded":
            continue  # every row is row 0's memory: only row 0 peaks at its label
        m = materialize(spec, c, "cpu")  # type: ignore[arg-type]
        logits, labels = m.tensors["logits"].double(), m.tensors["labels"]
        p = torch.softmax(logits, -1).gather(-1, labels[:, None].long())[:, 0]
        want = 1 / (1 + math.exp(-c.inputs["labels"].param))
        # the label's logit is exact in float64; stored in float32 it moves by up to one ulp of the
        # logits' magnitude (an offset of 1000 among the extremes), and p by p(1 - p) times that
        ulp = torch.finfo(torch.float32).eps * float(logits.abs().max())
        tol = want * (1 - want) * 2 * ulp + 1e-5 * want + 1e-6
        assert float((p - want).abs().max()) <= tol, (c.describe(), p, want)
    ps = [1 / (1 + math.exp(-t)) for t in PEAK_MARGINS]
    assert min(ps) == 0.5 and max(ps) > 1 - 1.1e-6


@pytest.mark.parametrize("kw, message", [
    ({"peak_of": "nope"}, "index 'labels' has peak_of='nope', which is not a float input"),
])
def test_peak_of_must_name_a_float_input_of_the_right_shape(kw: dict[str, object], message: str) -> None:
    with pytest.raises(SpecError, match=message):
        _ce_spec(**kw)


def test_peak_of_needs_the_index_shape_plus_high() -> None:
    with pytest.raises(SpecError, match=r"whose shape \('classes', 'rows'\) should be the index's shape plus high"):
        @gg.spec(dims={"rows": gg.Dim(1, 64), "classes": gg.Dim(2, 4096)},
                 inputs={"logits": gg.Tensor(("classes", "rows")),
                         "labels": gg.Index(("rows",), high="classes", peak_of="logits")},
                 reference=lambda logits, labels: logits)
        def wrong(logits, labels):  # noqa: ANN001, ANN202
            return logits
