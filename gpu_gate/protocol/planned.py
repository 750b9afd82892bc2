"""Planned sizes: both sides of every size threshold the wrapper's source shows, and the joint
corners of the dims.

Drawing each dim on its own, the schedule never combined a long reduction with a narrow second dim,
where a backward took its "many rows, narrow hidden" path (``if n_rows >= 32768 and n_cols <= 256``).
For each condition (:class:`~gpu_gate.protocol.shapes.Threshold`, read statically on the judge's
side), every conjunction gets a case where all its comparisons hold, each at its boundary, and, for
each comparison, one just across its boundary with the others still holding: jointly, for the dims
a condition combines. Each fits the case budget by shrinking first the dims the condition does not
use, then the others as long as no comparison changes side; a side that cannot fit is said so.
Without any threshold the corners are still swept: a long reduction with the smallest other dims,
and the shortest reduction with the largest other dims that fit.
"""
from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping

from ..spec import Dim, Spec
from .shapes import Atom, Threshold

MAX_CONJUNCTIONS = 4  # of one condition
MAX_POINTS = 48  # planned sizes per spec, thresholds and corners together


@dataclasses.dataclass(frozen=True)
class Point:
    dims: dict[str, int]
    why: str


Fits = Callable[[dict[str, int]], bool]


def canonical_dims(spec: Spec, canonical: Callable[[Dim], int]) -> dict[str, int]:
    return {d: canonical(dim) for d, dim in spec.dims.items()}


def threshold_points(spec: Spec, thresholds: tuple[Threshold, ...], base: Mapping[str, int], fits: Fits,
                     shrink: Callable[[Dim, int], int | None]) -> tuple[list[Point], list[str]]:
    """The sides of every threshold, and why any side could not be run."""
    points: list[Point] = []
    skipped: list[str] = []
    seen: set[tuple[tuple[str, int], ...]] = set()
    for t in thresholds:
        for conj in t.any_of[:MAX_CONJUNCTIONS]:
            atoms = tuple(a for a in conj if a.dims() and a.dims() <= set(spec.dims))
            if not atoms:
                continue
            for p, note in _sides(spec, t, atoms, dict(base), fits, shrink):
                if p is None:
                    skipped.append(note)
                    continue
                key = tuple(sorted(p.dims.items()))
                if key not in seen:
                    seen.add(key)
                    points.append(p)
    return points, skipped


def _sides(spec: Spec, t: Threshold, atoms: tuple[Atom, ...], base: dict[str, int], fits: Fits,
           shrink: Callable[[Dim, int], int | None]) -> list[tuple[Point | None, str]]:
    label = f"{t.where} `{t.text}`"
    inside = _satisfy(spec, atoms, base)
    if inside is None:
        return [(None, f"{label}: no sizes within the spec's dims make {_text(atoms)} hold")]
    tight = _tighten(spec, atoms, inside)
    out: list[tuple[Point | None, str]] = []
    pattern = {a: True for a in atoms}
    dims = _fit(spec, tight, pattern, fits, shrink)
    what = f"inside {label}: {_text(atoms)}"
    out.append((Point(dims, what), "") if dims is not None else (None, f"{what}: no such case fits the case budget"))
    for a in atoms:
        across = _across(spec, a, atoms, tight)
        what = f"outside {label}: {a.negated().text()}" + (f" with {_text([b for b in atoms if b != a])}"
                                                               if len(atoms) > 1 else "")
        if across is None:
            continue  # no size within the spec's dims crosses it: there is no other side to run
        dims = _fit(spec, across, {**pattern, a: False}, fits, shrink)
        out.append((Point(dims, what), "") if dims is not None else (None, f"{what}: no such case fits the case "
                                                                         f"budget"))
    return out


def _text(atoms: tuple[Atom, ...] | list[Atom]) -> str:
    return " and ".join(a.text() for a in atoms)


def _ok(atoms: tuple[Atom, ...], dims: Mapping[str, int], pattern: Mapping[Atom, bool] | None = None) -> bool:
    for a in atoms:
        h = a.holds(dims)
        if h is None:
            continue
        if h != (pattern[a] if pattern is not None else True):
            return False
    return True


class Domain:
    """The sizes a dim allows, by position (``values=``, or ``lo..hi`` in steps of ``multiple_of``)."""

    def __init__(self, dim: Dim) -> None:
        self.dim = dim
        if dim.values is not None:
            self.values: list[int] | None = sorted(set(dim.values))
            self.n = len(self.values)
            self.first = 0
        else:
            m = dim.multiple_of
            self.values = None
            self.first = -(-max(dim.lo, 0) // m)
            self.n = max(0, dim.hi // m - self.first + 1)

    def at(self, i: int) -> int:
        return self.values[i] if self.values is not None else (self.first + i) * self.dim.multiple_of

    def index(self, v: int) -> int:
        """The position of the allowed size nearest ``v``."""
        if self.values is not None:
            return min(range(self.n), key=lambda i: abs(self.values[i] - v))  # type: ignore[index]
        i = round(v / self.dim.multiple_of) - self.first
        return min(max(i, 0), self.n - 1)


def _flip(spec: Spec, a: Atom, dims: Mapping[str, int], d: str) -> tuple[int, int] | None:
    """The nearest boundary of ``a`` along dim ``d`` from ``dims``: (the size on the current side,
    the one just across), adjacent sizes the dim allows; None where ``a`` does not change side."""
    dom = Domain(spec.dims[d])
    if dom.n == 0:
        return None
    c = dom.index(dims[d])

    def holds(i: int) -> bool | None:
        return a.holds({**dims, d: dom.at(i)})

    here = holds(c)
    if here is None:
        return None
    best: tuple[int, int] | None = None
    for step in (1, -1):
        prev, i, jump = c, c + step, 1
        while 0 <= i < dom.n and holds(i) == here:
            prev, jump = i, jump * 2
            i = c + step * jump
        if not 0 <= i < dom.n:
            i = dom.n - 1 if step > 0 else 0
            if holds(i) == here:
                continue
        lo, hi = (prev, i) if step > 0 else (i, prev)
        while abs(hi - lo) > 1:  # bisect: lo and hi on different sides
            mid = (lo + hi) // 2
            if (holds(mid) == here) == (step > 0):
                lo = mid
            else:
                hi = mid
        same, other = (lo, hi) if step > 0 else (hi, lo)
        if best is None or abs(dom.at(same) - dims[d]) < abs(best[0] - dims[d]):
            best = (dom.at(same), dom.at(other))
    return best


def _satisfy(spec: Spec, atoms: tuple[Atom, ...], base: dict[str, int]) -> dict[str, int] | None:
    """Sizes near ``base`` where every atom holds: each failing one moved across its nearest
    boundary, along the dim that leaves most of the others holding."""
    p = dict(base)
    for _ in range(3):
        failing = [a for a in atoms if a.holds(p) is False]
        if not failing:
            return p
        for a in failing:
            if a.holds(p) is not False:
                continue
            best: tuple[tuple[int, int], dict[str, int]] | None = None
            for d in sorted(a.dims()):
                pair = _flip(spec, a, p, d)
                if pair is None:
                    continue
                cand = {**p, d: pair[1]}
                score = (sum(b.holds(cand) is False for b in atoms), sum(cand.values()))
                if best is None or score < best[0]:
                    best = (score, cand)
            if best is not None:
                p = best[1]
    return p if _ok(atoms, p) else None


def _tighten(spec: Spec, atoms: tuple[Atom, ...], p: dict[str, int]) -> dict[str, int]:
    """Each atom's dim moved to its boundary (on the side where it holds), where the others still hold."""
    p = dict(p)
    for a in atoms:
        for d in sorted(a.dims()):
            pair = _flip(spec, a, p, d)
            if pair is None:
                continue
            cand = {**p, d: pair[0]}
            if _ok(atoms, cand):
                p = cand
                break
    return p


def _across(spec: Spec, a: Atom, atoms: tuple[Atom, ...], p: dict[str, int]) -> dict[str, int] | None:
    """``p`` with ``a`` just across its boundary and the other atoms still holding."""
    pattern = {b: b != a for b in atoms}
    for d in sorted(a.dims()):
        pair = _flip(spec, a, p, d)
        if pair is None:
            continue
        cand = {**p, d: pair[1]}
        if _ok(atoms, cand, pattern):
            return cand
    return None


def _fit(spec: Spec, p: dict[str, int], pattern: Mapping[Atom, bool], fits: Fits,
         shrink: Callable[[Dim, int], int | None]) -> dict[str, int] | None:
    """``p`` shrunk until it fits: the dims no atom uses first, the largest first, then the others
    as long as every atom stays on its side."""
    atoms = tuple(pattern)
    used = set().union(*(a.dims() for a in atoms)) if atoms else set()
    p = dict(p)
    for _ in range(400):
        if fits(p):
            return p
        moved = False
        for group in ([d for d in p if d not in used], [d for d in p if d in used]):
            for d in sorted(group, key=lambda k: -p[k]):
                smaller = shrink(spec.dims[d], p[d])
                if smaller is None:
                    continue
                cand = {**p, d: smaller}
                if _ok(atoms, cand, pattern):
                    p, moved = cand, True
                    break
            if moved:
                break
        if not moved:
            return None
    return None


def corner_points(spec: Spec, max_reduction: int, smallest: Callable[[Dim], int], largest: Callable[[Dim], int],
                  fits_keep: Callable[[dict[str, int], str | None], dict[str, int]]) -> list[Point]:
    """The joint corners: each reduction dim at its longest with the other dims at their smallest,
    and at its shortest with the others at their largest that fit (without a reduction dim, each
    dim at its largest with the others at their smallest)."""
    reductions = [d for d, dim in spec.dims.items() if dim.reduction]
    out: list[Point] = []
    if len(spec.dims) < 2:
        return out
    for d in reductions or list(spec.dims):
        dims = {k: smallest(v) for k, v in spec.dims.items()}
        dims[d] = largest(spec.dims[d])
        what = "reduction" if reductions else "dim"
        out.append(Point(fits_keep(dims, d), f"corner: {what} {d!r} longest, the other dims smallest"))
        if reductions:
            dims = {k: largest(v) for k, v in spec.dims.items()}
            dims[d] = smallest(spec.dims[d])
            out.append(Point(fits_keep(dims, None), f"corner: reduction {d!r} shortest, the other dims largest"))
    unique: dict[tuple[tuple[str, int], ...], Point] = {}
    for p in out:
        unique.setdefault(tuple(sorted(p.dims.items())), p)
    return list(unique.values())
