"""What the first fuzzed cases of every spec meet, whatever the seed: each distribution a float input
allows at its most extreme parameter, and the sizes of common models.

A softmax without max subtraction passed 8 cases and 24 on a CPU: the ``offset`` distribution at
mean 1000 catches it at once, but the schedule drew it once, with a mild mean, and ``heavy_tail``
never. A kernel wrong only at 3072 columns was caught on some seeds. So the first fuzzed cases take
the distributions in this order, each at its extreme, and the common model sizes one after another.
"""
from __future__ import annotations

from collections.abc import Sequence

from ..spec import Dim

# The most dangerous first: a job of 8 cases on a CPU meets most of them.
EXTREME_ORDER = ("offset", "heavy_tail", "normal", "denormal", "ties", "peaked", "neg_inf_spans", "uniform_pos")
OFFSET_EXTREME = 1000.0  # the mean of the offset distribution (softmax without max subtraction overflows)
PEAK_EXTREME = 32.0  # sigmas of the hot class of peaked logits
# The normal distribution's extreme: its scale, the largest power of two at which the reference (in
# float64 and in the kernel's dtype) stays finite and within the output dtype. The judge settles it
# before the case runs (gpu_gate.judge.equivalence.magnitude); unsettled, it means a unit scale.
MAGNITUDE = -1.0
EXTREME_PARAM = {"offset": OFFSET_EXTREME, "peaked": PEAK_EXTREME, "normal": MAGNITUDE}
# Hidden, intermediate and vocabulary sizes of common models, in the order the first cases take them.
MODEL_EARLY = (768, 1024, 2048, 3072, 4096, 5120, 8192, 11008, 14336)


def extreme(dists: Sequence[str], k: int) -> tuple[str, float] | None:
    """The ``k``-th extreme of the distributions allowed: (distribution, parameter)."""
    ordered = [d for d in EXTREME_ORDER if d in dists] + [d for d in dists if d not in EXTREME_ORDER]
    if k >= len(ordered):
        return None
    d = ordered[k]
    return d, EXTREME_PARAM.get(d, 0.0)


def model_sizes(dim: Dim) -> list[int]:
    """The common model sizes this dim allows."""
    return [n for n in MODEL_EARLY if dim.allows(n)]


def model_sizes_for(dims: dict[str, Dim], k: int) -> dict[str, int]:
    """The sizes of the ``k``-th early model-size case: each dim that allows one takes its ``k``-th
    common model size (the case keeps them while the other dims shrink to fit), so every size of
    every dim comes within the first ``len(MODEL_EARLY)`` of them."""
    out = {}
    for d, dim in dims.items():
        sizes = model_sizes(dim)
        if k < len(sizes):
            out[d] = sizes[k]
    return out
