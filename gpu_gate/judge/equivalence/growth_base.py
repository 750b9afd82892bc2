"""Error growth compared with the base's code, on the same lengths and the same inputs.

A weak accumulation regression (a running sum that now rounds where it did not) reaches 1.5x
torch's error at the longest length: under the 2x rule of every single case, under the 4x
regression factor, and under the growth sweep's comparison with torch, whose own error grows
too. What gives it away is the base's curve: on the same inputs the base's error stays flat while
the head's grows. So, in a differential run, the head's curve is compared with the base's as the
sweep compares it with torch's, with the floor the engine's differential rule uses (errors below a
quarter of an epsilon of the output dtype are rounding, not accuracy).
"""
from __future__ import annotations

from typing import Any

from ...findings import Finding
from ...protocol.cases import Case, log_slope
from .compare import EPS
from .engine import REGRESSION_FLOOR_EPS

SLOPE_MARGIN = 0.3  # log-log slope of the head's error over the base's
RATIO = 1.5  # the head's error over the base's at the longest length, for either rule
JUMP_FACTOR = 1.5  # ... and over its median ratio at the shorter lengths, for a jump


def grows_faster(sizes: list[int], head: list[float], base: list[float], dtype: str) -> tuple[bool, bool, float, float]:
    """(sloped, jumped, the head's slope, the base's slope): whether the head's error grows faster
    than the base's along the lengths, by slope or by a jump at the longest length."""
    floor = REGRESSION_FLOOR_EPS * EPS.get(dtype, EPS["float32"])
    h = [max(x, floor) for x in head]
    b = [max(x, floor) for x in base]
    sh, sb = log_slope(sizes, h), log_slope(sizes, b)
    if head[-1] <= floor or len(sizes) < 3:
        return False, False, sh, sb
    ratios = [x / y for x, y in zip(h, b)]
    earlier = sorted(ratios[:-1])
    median = earlier[len(earlier) // 2]
    sloped = sh - sb > SLOPE_MARGIN and ratios[-1] >= RATIO
    jumped = ratios[-1] >= RATIO and ratios[-1] >= JUMP_FACTOR * median
    return sloped, jumped, sh, sb


def finding(job: Any, dim: str, dtype: str, sign: str, seed: int, last: Case, sizes: list[int], head: list[float],
            base: list[float], torch_errors: list[float], sloped: bool, sh: float, sb: float,
            repro: str, draws: int = 1) -> Finding:
    rows = ", ".join(f"{s}: {h:.2g} vs {b:.2g}" for s, h, b in zip(sizes, head, base))
    ratio = head[-1] / max(base[-1], 1e-300)
    how = (f"slope {sh:.2f} vs the base's {sb:.2f} (log-log)" if sloped else
           f"a jump at the longest lengths (slope {sh:.2f} vs the base's {sb:.2f})")
    pooled = f" (at {sizes[-1]}, the root mean square over {draws} draws of inputs)" if draws > 1 else ""
    message = (f"error grows faster than the base's code along reduction dim {dim!r} in {dtype} on {sign} data, on the "
               f"same inputs: {how}; at {sizes[-1]} it is {ratio:.3g}x the base's error ({head[-1] / max(torch_errors[-1], 1e-300):.3g}x "
               f"torch's), though every single case may be within the tolerance. Errors by length (head vs base): "
               f"{rows}{pooled}. Likely an accumulation that now rounds where the base's did not.")
    return Finding(check="equivalence", kind="error-growth", spec=job.spec.id, case=last.id, repro=repro,
                   message=message,
                   details={"dim": dim, "dtype": dtype, "data": sign, "token": last.token(), "case": last.describe(),
                            "slope_candidate": sh, "slope_base": sb, "jump": not sloped, "against": "base",
                            "change": "new", "draws_at_longest": draws})
