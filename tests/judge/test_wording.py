"""How the differential's magnitude rule reads (issue 40): a ratio where the base's code has an
error, and words where it is exact (never "2.09e+296x less accurate")."""
from __future__ import annotations

from gpu_gate.judge.equivalence.wording import less_accurate


def test_a_base_error_of_zero_reads_as_exact_not_as_a_ratio() -> None:
    text = less_accurate("out", 3.2e-7, 0.0, 6, 4.0)
    assert "the base's code is exact here" in text and "x less accurate" not in text
    assert "e+" not in text


def test_a_base_with_an_error_reads_as_a_ratio() -> None:
    text = less_accurate("out", 8e-6, 1e-6, 6, 4.0)
    assert "8x less accurate than the base's code on the same case" in text and "at most 4x" in text
