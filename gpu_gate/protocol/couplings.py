"""Couplings between an integer input and a float input, inferred from the spec's shapes.

An index whose ``high=`` names a dim that a float input also has points along that dim: labels
into a vocabulary of logits, token ids into the rows of an embedding table, positions into a
cache. Kernels that are wrong only where the index meets that input's peak (a cross entropy that
rounds p(label) to bf16 is wrong only where p(label) is close to 1, FACTS.md) pass every case
where the index is drawn apart from the values. So some cases put the index at the input's peak,
with the peak's strength swept from p = 0.5 to 1 - 1e-6, or at a near-tie with the input's
largest value, whether or not the spec wrote ``peak_of=`` (which couples every case).

A coupling is *aligned* where the float input's other axes begin with the index's own shape
(logits ``(rows, classes)`` and labels ``(rows,)``; a cache ``(batch, seq, d)`` and positions
``(batch,)``): each index element then marks its own slice. Otherwise (ids ``(tokens,)`` into a
table ``(vocab, dim)``) one hot slice is peaked and half of the index points at it.
"""
from __future__ import annotations

import dataclasses
import math
from typing import TYPE_CHECKING

from ..spec import Index, Spec, Tensor

if TYPE_CHECKING:
    import random

    import torch

# logit margins of a label over the logsumexp of the other classes:
# p(label) = sigmoid(margin) = 0.5, 0.9, 0.99, 0.999, 0.9999, 0.99999, 1 - 1e-6
PEAK_MARGINS = (0.0, 2.2, 4.6, 6.9, 9.2, 11.5, 13.8)
# the modes the first fuzzed cases take in turn: every peak strength, then a near-tie
MODES = tuple(("peak", m) for m in PEAK_MARGINS) + (("tie", 0.0),)
COUPLED_SHARE = 0.35  # of the later cases, this share is coupled too (drawn at random)


@dataclasses.dataclass(frozen=True)
class Coupling:
    index: str
    target: str
    axis: int  # the target's axis the index points along
    aligned: bool
    declared: bool  # written as peak_of=

    def text(self, spec: Spec) -> str:
        inp = spec.inputs[self.index]
        assert isinstance(inp, Index)
        return f"{self.index} -> {self.target} along {inp.high!r}" + (" (peak_of=)" if self.declared else "")


def couplings(spec: Spec) -> list[Coupling]:
    """Every (index, float input) pair whose index points along a dim the float input has. An
    index with ``peak_of=`` is coupled to that input alone."""
    out = []
    for name, inp in spec.inputs.items():
        if not isinstance(inp, Index) or not isinstance(inp.high, str):
            continue
        for tname, t in spec.inputs.items():
            if not isinstance(t, Tensor) or (inp.peak_of is not None and tname != inp.peak_of):
                continue
            shape = tuple(t.shape)
            axes = [i for i, d in enumerate(shape) if d == inp.high]
            if not axes:
                continue
            axis = axes[-1]
            others = shape[:axis] + shape[axis + 1:]
            aligned = tuple(others[:len(inp.shape)]) == tuple(inp.shape)
            out.append(Coupling(name, tname, axis, aligned, inp.peak_of == tname))
    return out


def of_index(spec: Spec, index: str) -> list[Coupling]:
    return [c for c in couplings(spec) if c.index == index]


def parse(couple: str) -> tuple[str, str] | None:
    """``"peak:logits"`` -> ``("peak", "logits")``."""
    mode, sep, target = couple.partition(":")
    return (mode, target) if sep and mode in ("peak", "tie") and target else None


def describe(couple: str, param: float) -> str:
    parsed = parse(couple)
    if parsed is None:
        return ""
    mode, target = parsed
    if mode == "tie":
        return f", at a near-tie in {target}"
    return f", at the peak of {target} (p={_p(param)})"


def _p(margin: float) -> str:
    p = 1.0 / (1.0 + math.exp(-margin))
    return f"1-{1 - p:.0e}" if p > 0.9999 else f"{p:.4g}"


def apply(values: dict[str, torch.Tensor], spec: Spec, index: str, couple: str, margin: float,
          gen: torch.Generator) -> None:
    """Couple ``values[index]`` and its target (float64), in place of the two entries."""
    parsed = parse(couple)
    found = [c for c in of_index(spec, index) if parsed is not None and c.target == parsed[1]]
    if not found:
        return
    c = found[0]
    mode = parsed[0] if parsed else "peak"
    target, idx = values[c.target], values[index]
    if target.numel() == 0 or idx.numel() == 0:
        return
    if not c.aligned:
        idx = _point_half_at(idx, gen)
        values[index] = idx
    values[c.target] = _coupled(target, idx, c, mode, margin)


def _point_half_at(idx: torch.Tensor, gen: torch.Generator) -> torch.Tensor:
    """Half of the index's elements (every other one) set to its first value: the hot slice."""
    flat = idx.reshape(-1).clone()
    flat[::2] = flat[0].clone()  # a view of flat[0] overlaps what it writes (refused on CUDA)
    return flat.reshape(idx.shape)


def _coupled(target: torch.Tensor, idx: torch.Tensor, c: Coupling, mode: str, margin: float) -> torch.Tensor:
    import torch

    moved = target.movedim(c.axis, -1)
    lead = moved.shape[:-1]
    if c.aligned:
        k = idx.dim()
        labels = idx.reshape(*idx.shape, *([1] * (len(lead) - k))).expand(lead)
    else:
        labels = torch.full(lead, int(idx.reshape(-1)[0]), dtype=torch.int64, device=target.device)
    rows = moved.reshape(-1, moved.shape[-1]).clone()
    lab = labels.reshape(-1, 1).to(torch.int64)
    rest = rows.scatter(-1, lab, -math.inf)
    if mode == "tie":
        top = rest.max(-1, keepdim=True).values
        # even rows: an exact tie with the largest other value; odd rows: above it by a hair that
        # float32 keeps and bfloat16 rounds away
        nudge = torch.zeros_like(top)
        nudge[1::2] = top[1::2].abs() * 2.0**-10
        level = torch.where(torch.isfinite(top), top + nudge, torch.zeros_like(top))
    else:
        lse = torch.logsumexp(rest, -1, keepdim=True)
        level = torch.where(torch.isfinite(lse), lse + margin, torch.full_like(lse, margin))
    rows = rows.scatter(-1, lab, level)
    return rows.reshape(moved.shape).movedim(-1, c.axis)


def choose(spec: Spec, index: str, canonical: bool, turn: int | None, rng: random.Random, *, infer: bool = True
           ) -> tuple[str, float]:
    """(couple, margin) for an index of a case: ``""`` where the case leaves it uncoupled. A
    declared ``peak_of=`` couples every case (the canonical one at p = 0.9); an inferred coupling
    leaves the canonical case alone, takes every mode in turn in the first fuzzed cases, and a
    share of the later ones at random."""
    options = of_index(spec, index)
    if not options:
        return "", 0.0
    declared = [c for c in options if c.declared]
    if declared:
        c = declared[0]
        if canonical:
            return f"peak:{c.target}", PEAK_MARGINS[1]
        if turn is not None and turn < len(PEAK_MARGINS):
            return f"peak:{c.target}", PEAK_MARGINS[turn]
        return f"peak:{c.target}", rng.choice(PEAK_MARGINS)
    if canonical or not infer:
        return "", 0.0
    if turn is not None and turn < len(MODES) * len(options):
        mode, margin = MODES[turn % len(MODES)]
        c = options[(turn // len(MODES)) % len(options)]
        return f"{mode}:{c.target}", margin
    if rng.random() >= COUPLED_SHARE:
        return "", 0.0
    mode, margin = rng.choice(MODES)
    return f"{mode}:{rng.choice(options).target}", margin
