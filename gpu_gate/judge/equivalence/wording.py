"""How a differential comparison of errors reads: a ratio where the base's code has an error to
divide by, and plain words where it has none (a ratio over an exact result is a meaningless
number like "2.09e+296x")."""
from __future__ import annotations

__all__ = ["EXACT_BELOW", "less_accurate"]

EXACT_BELOW = 1e-30  # a base error below this is the base's code being exact, not a divisor


def less_accurate(output: str, head_err: float, base_err: float, runs: int, factor: float) -> str:
    """The sentence of a ``less-accurate`` finding (or of a failure the change made far worse)."""
    measured = (f"normwise relative error {head_err:.3g} against {base_err:.3g}, the best and the worst of {runs} "
                f"runs each")
    allowed = f"at most {factor:g}x is allowed, regression_factor"
    if base_err < EXACT_BELOW:
        return (f"output {output!r}: this change makes the result less accurate than the base's code on the same "
                f"case, where the base's code is exact here ({measured}; {allowed}, and the base's error is 0)")
    return (f"output {output!r}: this change makes the result {head_err / base_err:.3g}x less accurate than the "
            f"base's code on the same case ({measured}; {allowed})")
