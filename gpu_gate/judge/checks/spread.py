"""The determinism check's magnitude rule against the base: where the base's code is
nondeterministic on a case too, the head's runs are the repository's debt only while they spread
no more than ``regression_factor`` times as far as the base's runs on the same case and output; a
head that spreads further is this change's doing (issue 40: the rule the equivalence check keeps
for accuracy, kept for run-to-run spread)."""
from __future__ import annotations

import dataclasses

from ...findings import Finding

__all__ = ["spread_of", "wider_than_base"]


def spread_of(f: Finding) -> dict[str, float]:
    """Per output: how far apart the runs of a nondeterminism finding landed (the largest
    difference of a repeat from the first run)."""
    return {str(k): float(v) for k, v in (f.details.get("spread_of") or {}).items()}


def wider_than_base(head: Finding, base: Finding, factor: float) -> Finding | None:
    """``head`` (the head's finding on a case) reworded as new where, on an output whose runs fail,
    its spread exceeds ``factor`` times the base's spread on the same case; None where every such
    output is within that (the base's debt)."""
    hs, bs = spread_of(head), spread_of(base)
    failing = sorted(head.details.get("worst_error_of") or hs)
    wider = [k for k in failing if hs.get(k, 0.0) > factor * bs.get(k, 0.0)]
    if not wider:
        return None
    said = "; ".join(_words(k, hs.get(k, 0.0), bs.get(k, 0.0)) for k in wider)
    message = (f"new (the base's code is nondeterministic on this case too, but this change's runs spread more than "
               f"{factor:g}x as far as the base's, regression_factor: {said}): {head.message}")
    return dataclasses.replace(head, message=message,
                               details={**head.details, "base_spread_of": bs, "change": "new"})


def _words(k: str, head: float, base: float) -> str:
    if base == 0.0:
        return f"output {k!r}: this change's runs differ by up to {head:.3g}, the base's agree bitwise"
    return f"output {k!r}: this change's runs differ by up to {head:.3g}, the base's by {base:.3g} ({head / base:.3g}x)"
