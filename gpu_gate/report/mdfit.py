"""Fitting the Markdown report into a size limit (65,536 characters for a PR comment) by whole blocks,
so a cut never falls inside a code fence, a table or a character: essential sections first, each in
document order, and a note saying how much of each section is not shown."""
from __future__ import annotations

import dataclasses

LIST_CAP = 100  # blocking reasons / not-run lines shown before the kernel tables get their room


@dataclasses.dataclass
class Section:
    title: str | None
    blocks: list[str]
    essential: bool = False
    joiner: str = "\n\n"
    omitted: str = "more not shown"
    capped: bool = False  # a one-line list: at most LIST_CAP lines once the report is shortened


def _section_text(s: Section, shown: int) -> str:
    body = s.joiner.join(s.blocks[:shown])
    note = _note(s, shown)
    if not body and not note:
        return ""
    return "\n\n".join(p for p in (s.title, body, note) if p)


def _note(s: Section, shown: int) -> str:
    hidden = len(s.blocks) - shown
    return f"_… {hidden} {s.omitted}; see the full report._" if hidden else ""


def _section_len(s: Section, shown: int, body_len: int) -> int:
    """len(_section_text(s, shown)) without building it; ``body_len`` is the joined blocks' length."""
    parts = [len(s.title or ""), body_len, len(_note(s, shown))]
    present = [n for n in parts if n]
    return 0 if not (body_len or parts[2]) else sum(present) + 2 * (len(present) - 1)


def assemble(sections: list[Section], shown: list[int] | None, footer: str = "") -> str:
    counts = shown if shown is not None else [len(s.blocks) for s in sections]
    texts = [_section_text(s, n) for s, n in zip(sections, counts)]
    return "\n\n".join(t for t in texts + [footer] if t) + "\n"


def fit(sections: list[Section], footer: str, max_chars: int) -> str:
    """Show as many whole blocks as fit: essential sections first, each in document order.

    Long one-line lists (blocking reasons, jobs that did not run) are capped so that they
    cannot crowd the kernel tables and the failure details out of the comment.
    """
    shown = [0] * len(sections)
    lengths = [_section_len(s, 0, 0) for s in sections]
    order = [i for i, s in enumerate(sections) if s.essential] + [i for i, s in enumerate(sections) if not s.essential]
    for i in order:
        _grow(sections, i, shown, lengths, footer, max_chars, LIST_CAP)
    text = assemble(sections, shown, footer)
    if len(text) > max_chars:  # not even the verdict and the footer fit: keep whole lines only
        text = _whole_lines(text, max_chars)
    return text


def _grow(sections: list[Section], i: int, shown: list[int], lengths: list[int], footer: str,
          max_chars: int, cap: int) -> None:
    s = sections[i]
    limit = min(cap, len(s.blocks)) if s.capped else len(s.blocks)
    body = len(s.joiner.join(s.blocks[: shown[i]]))
    while shown[i] < limit:
        grown = body + len(s.blocks[shown[i]]) + (len(s.joiner) if shown[i] else 0)
        candidate = _section_len(s, shown[i] + 1, grown)
        if _total(lengths, i, candidate, footer) > max_chars:
            break
        shown[i] += 1
        body, lengths[i] = grown, candidate


def _total(lengths: list[int], i: int, replaced: int, footer: str) -> int:
    parts = [replaced if j == i else n for j, n in enumerate(lengths)] + [len(footer)]
    present = [n for n in parts if n]
    return sum(present) + 2 * (len(present) - 1) + 1


def _whole_lines(text: str, max_chars: int) -> str:
    out = ""
    for line in text.splitlines(keepends=True):
        if len(out) + len(line) > max_chars or line.startswith("```"):
            break
        out += line
    return out
