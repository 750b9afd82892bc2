"""Which spec of the base each spec of the head is: paired with what they judge, not by name alone.

In order, each step pairing only specs still unpaired on both sides:
1. the same spec (file and name);
2. a spec file git's rename detection follows: the same name there, or the one spec on each side;
3. the same name, where it is unique;
4. the same kernels: a base spec whose kernels (at the head, through renames and moves) are judged by
   exactly one unpaired head spec, and that head spec's by no other unpaired base spec.
A base spec left unpaired is retired, which is allowed only when its kernels are gone; a head spec
left unpaired is new (see ``apply.py``).
"""
from __future__ import annotations

import dataclasses

from .specrules import SpecRules


@dataclasses.dataclass(frozen=True)
class Pairing:
    base: dict[str, SpecRules]  # head spec id -> the base's spec that judges it
    how: dict[str, str]  # head spec id -> how they were paired, where not the same spec


def pair(base: dict[str, SpecRules], head: dict[str, SpecRules], renamed: dict[str, str],
         base_judges: dict[str, frozenset[str]], head_judges: dict[str, frozenset[str]]) -> Pairing:
    """``renamed``: base path -> head path (git); ``base_judges``: base spec id -> the head's files that
    hold its kernels; ``head_judges``: head spec id -> the kernel files it judges."""
    out = Pairing({hid: base[hid] for hid in head if hid in base}, {})
    left = {sid: s for sid, s in base.items() if sid not in out.base}
    _by_renamed_file(out, left, head, renamed)
    _by_unique_name(out, left, head)
    _by_kernels(out, left, head, base_judges, head_judges)
    return out


def _take(out: Pairing, left: dict[str, SpecRules], hid: str, old: SpecRules, how: str) -> None:
    out.base[hid] = old
    if how:
        out.how[hid] = how
    del left[old.id]


def _by_renamed_file(out: Pairing, left: dict[str, SpecRules], head: dict[str, SpecRules],
                     renamed: dict[str, str]) -> None:
    for old_file, new_file in sorted(renamed.items()):
        olds = [s for s in left.values() if s.file == old_file]
        news = [s for hid, s in sorted(head.items()) if s.file == new_file and hid not in out.base]
        for new in list(news):
            same = [s for s in olds if s.name == new.name]
            if len(same) == 1:
                _take(out, left, new.id, same[0], f"git renamed {old_file} to {new_file}")
                olds.remove(same[0])
                news.remove(new)
        if len(olds) == 1 and len(news) == 1:
            _take(out, left, news[0].id, olds[0], f"git renamed {old_file} to {new_file}")


def _by_unique_name(out: Pairing, left: dict[str, SpecRules], head: dict[str, SpecRules]) -> None:
    for hid, spec in sorted(head.items()):
        if hid in out.base:
            continue
        same = [s for s in left.values() if s.name == spec.name]
        if len(same) == 1:
            _take(out, left, hid, same[0], "the same name" if same[0].file != spec.file else "")


def _by_kernels(out: Pairing, left: dict[str, SpecRules], head: dict[str, SpecRules],
                base_judges: dict[str, frozenset[str]], head_judges: dict[str, frozenset[str]]) -> None:
    free = [hid for hid in sorted(head) if hid not in out.base]

    def overlap(bid: str, hid: str) -> frozenset[str]:
        return base_judges.get(bid, frozenset()) & head_judges.get(hid, frozenset())

    for bid in sorted(left):
        mine = [hid for hid in free if overlap(bid, hid)]
        if len(mine) != 1:
            continue
        rivals = [other for other in left if other != bid and overlap(other, mine[0])]
        if rivals:
            continue
        shared = ", ".join(sorted(overlap(bid, mine[0]))[:3])
        _take(out, left, mine[0], left[bid], f"both judge {shared}")
        free.remove(mine[0])
