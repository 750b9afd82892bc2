"""Contention cases: many programs on few locks or partial rows, wide rows, hot indices."""
from __future__ import annotations

import gpu_gate as gg
from gpu_gate.protocol.cases import case_bytes
from gpu_gate.judge.equivalence.contention import contention_cases, gpu_budget
from gpu_gate.spec import Spec, specs_in_module


@gg.spec(dims={"rows": gg.Dim(1, 65536), "hidden": gg.Dim(1, 16384, reduction=True), "vocab": gg.Dim(1, 50000)},
         inputs={"x": gg.Tensor(("rows", "hidden"), dtypes=["float32", "bfloat16"]),
                 "ids": gg.Index(("rows",), high="vocab")},
         reference=lambda x, ids: x)
def norm_and_scatter(x, ids):
    return x


def _find() -> Spec:
    return specs_in_module(__name__)[0]


def test_rows_then_widest_within_the_budget() -> None:
    spec = _find()
    budget = 2 << 30
    rows, wide = contention_cases(spec, seed=5, dtype="float32", budget=budget)
    assert rows.dims["hidden"] == 4096 and rows.dims["rows"] >= 8192
    assert wide.dims["hidden"] == 16384 and wide.dims["rows"] < rows.dims["rows"]
    for c in (rows, wide):
        assert case_bytes(spec, c.dims, c.inputs) <= budget
        assert c.inputs["ids"].dist == "zipf" and c.inputs["x"].dtype == "float32"
        assert {i.layout for i in c.inputs.values()} == {"contiguous"}
    # reproducible, and replayable from their tokens
    again = contention_cases(spec, seed=5, dtype="float32", budget=budget)
    assert [c.token() for c in again] == [rows.token(), wide.token()]


def test_the_gpu_budget_follows_free_memory() -> None:
    assert gpu_budget(None, 4) == 4 << 30
    assert gpu_budget(3 << 30, 4) == 1 << 30
    assert gpu_budget(60 << 30, 4) == 4 << 30

