"""What every spec's first cases meet, whatever the seed: each distribution its float inputs allow
at its most extreme parameter (so that 8 cases on a CPU meet them), the common model sizes within
each dim's bounds, and, where an index points along a dim a float input has, that index at the
input's peak (p(label) from 0.5 to 1 - 1e-6) and at a near-tie, with no peak_of= written."""
from __future__ import annotations

import math

import pytest
import torch

import gpu_gate as gg
from gpu_gate.protocol.cases import DEFAULT_FLOAT_DISTS, Case, ScheduleOptions, schedule
from gpu_gate.protocol.couplings import PEAK_MARGINS, couplings
from gpu_gate.protocol.early import MAGNITUDE, MODEL_EARLY, OFFSET_EXTREME, PEAK_EXTREME
from gpu_gate.protocol.inputs import materialize

MiB = 1 << 20


def _opts(cases: int, seed: int = 0, **kw: object) -> ScheduleOptions:
    return ScheduleOptions(cases=cases, seed=seed, dtypes=None, max_case_bytes=64 * MiB, **kw)  # type: ignore[arg-type]


def _rowwise(reduction: bool) -> object:
    @gg.spec(dims={"rows": gg.Dim(1, 64), "n": gg.Dim(1, 1 << 18, reduction=reduction)},
             inputs={"x": gg.Tensor(("rows", "n"), dtypes=["float32", "float16"])}, reference=lambda x: x)
    def s(x):  # noqa: ANN001, ANN202
        return x

    return s


@pytest.mark.parametrize("reduction", [False, True])
@pytest.mark.parametrize("seed", range(5))
def test_every_distribution_at_its_extreme_within_8_cases(reduction: bool, seed: int) -> None:
    cases = schedule(_rowwise(reduction), _opts(8, seed))
    seen = {(c.inputs["x"].dist, c.inputs["x"].param) for c in cases[1:]}
    assert {d for d, _ in seen} == set(DEFAULT_FLOAT_DISTS)
    assert ("offset", OFFSET_EXTREME) in seen and ("peaked", PEAK_EXTREME) in seen and ("normal", MAGNITUDE) in seen


def test_a_pinned_list_of_distributions_gets_its_own_extremes_first() -> None:
    @gg.spec(dims={"n": gg.Dim(1, 4096)}, inputs={"x": gg.Tensor(("n",), dists=["normal", "offset"])},
             reference=lambda x: x)
    def s(x):  # noqa: ANN001, ANN202
        return x

    cases = schedule(s, _opts(4))
    assert [(c.inputs["x"].dist, c.inputs["x"].param) for c in cases[1:3]] == [("offset", OFFSET_EXTREME),
                                                                                ("normal", MAGNITUDE)]


@pytest.mark.parametrize("seed", range(5))
def test_common_model_sizes_come_early_on_every_seed(seed: int) -> None:
    @gg.spec(dims={"rows": gg.Dim(1, 16), "hidden": gg.Dim(1, 16384), "inter": gg.Dim(1, 4096)},
             inputs={"x": gg.Tensor(("rows", "hidden")), "y": gg.Tensor(("rows", "inter"))}, reference=lambda x, y: x)
    def s(x, y):  # noqa: ANN001, ANN202
        return x

    cases = schedule(s, _opts(24, seed))
    hidden = {c.dims["hidden"] for c in cases[:16]}
    inter = {c.dims["inter"] for c in cases[:16]}
    assert set(MODEL_EARLY) <= hidden, sorted(set(MODEL_EARLY) - hidden)
    assert {n for n in MODEL_EARLY if n <= 4096} <= inter


def _ce() -> object:
    @gg.spec(dims={"rows": gg.Dim(1, 64), "classes": gg.Dim(2, 4096)},
             inputs={"logits": gg.Tensor(("rows", "classes")), "labels": gg.Index(("rows",), high="classes")},
             reference=lambda logits, labels: logits)
    def ce(logits, labels):  # noqa: ANN001, ANN202
        return logits

    return ce


def test_labels_over_the_logits_classes_are_coupled_without_peak_of() -> None:
    spec = _ce()
    (c,) = couplings(spec)  # type: ignore[arg-type]
    assert (c.index, c.target, c.axis, c.aligned, c.declared) == ("labels", "logits", 1, True, False)
    cases = schedule(spec, _opts(12))  # type: ignore[arg-type]
    assert cases[0].inputs["labels"].couple == "", "the canonical case draws labels apart"
    modes = [(ch.couple, ch.param) for ch in (k.inputs["labels"] for k in cases[1:9])]
    assert modes == [*(("peak:logits", m) for m in PEAK_MARGINS), ("tie:logits", 0.0)]
    for case in cases[1:9]:
        if case.inputs["logits"].layout == "expanded":
            continue  # every row is row 0's memory
        m = materialize(spec, case, "cpu")  # type: ignore[arg-type]
        logits, labels = m.tensors["logits"].double(), m.tensors["labels"].long()
        label_logit = logits.gather(-1, labels[:, None])[:, 0]
        others = logits.scatter(-1, labels[:, None], -math.inf)
        if case.inputs["labels"].couple.startswith("tie"):
            assert "at a near-tie in logits" in case.describe()
            assert torch.equal(label_logit[::2], others.amax(-1)[::2]), "even rows: an exact tie"
        else:
            p = torch.softmax(logits, -1).gather(-1, labels[:, None])[:, 0]
            want = 1 / (1 + math.exp(-case.inputs["labels"].param))
            tol = want * (1 - want) * 2 * torch.finfo(torch.float32).eps * float(logits.abs().max()) + 1e-5
            assert float((p - want).abs().max()) <= tol, case.describe()
            assert "at the peak of logits (p=" in case.describe()


def test_ids_into_an_embedding_table_point_at_its_peaked_row() -> None:
    @gg.spec(dims={"tokens": gg.Dim(2, 64), "vocab": gg.Dim(2, 512), "dim": gg.Dim(1, 64)},
             inputs={"ids": gg.Index(("tokens",), high="vocab"), "table": gg.Tensor(("vocab", "dim"))},
             reference=lambda ids, table: table[ids])
    def emb(ids, table):  # noqa: ANN001, ANN202
        return table[ids]

    (c,) = couplings(emb)  # type: ignore[arg-type]
    assert (c.axis, c.aligned) == (0, False)
    case = Case("c1", 5, {"tokens": 16, "vocab": 100, "dim": 8},
                {"ids": gg_choice("int64", "uniform", 9.2, "peak:table"), "table": gg_choice("float32", "normal")})
    m = materialize(emb, case, "cpu")  # type: ignore[arg-type]
    ids, table = m.tensors["ids"], m.tensors["table"].double()
    hot = int(ids[0])
    assert torch.equal(ids[::2], torch.full_like(ids[::2], hot)), "half of the ids point at the hot row"
    p = torch.softmax(table, 0)[hot]
    assert float(p.min()) > 0.999, "the hot row is the peak of every column"


def gg_choice(dtype: str, dist: str, param: float = 0.0, couple: str = ""):  # type: ignore[no-untyped-def]
    from gpu_gate.protocol.cases import InputChoice

    return InputChoice(dtype, dist, "contiguous", param, couple)


def test_a_coupled_case_round_trips_and_old_tokens_still_read() -> None:
    case = schedule(_ce(), _opts(4))[1]  # type: ignore[arg-type]
    assert Case.from_token(case.token()) == case and case.inputs["labels"].couple
    plain = Case.from_json({"id": "c0", "seed": 1, "dims": {"n": 3},
                            "inputs": {"x": {"dtype": "float32", "dist": "normal", "layout": "contiguous", "param": 0}}})
    assert plain.inputs["x"].couple == "" and "couple" not in plain.to_json()["inputs"]["x"]
