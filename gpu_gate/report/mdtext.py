"""Markdown text that survives what it quotes: code spans and fences longer than any backtick run
inside, escaped plain text, collapsed blocks, and shortened messages and logs."""
from __future__ import annotations

import html
import re

from . import clean_text, cut, first_line


def code(text: str) -> str:
    """An inline code span that survives backticks, newlines and table pipes in ``text``."""
    text = clean_text(text).replace("\n", " ")
    ticks = "`" * (max((len(m) for m in re.findall(r"`+", text)), default=0) + 1)
    pad = " " if text.startswith("`") or text.endswith("`") else ""
    return f"{ticks}{pad}{text}{pad}{ticks}".replace("|", "\\|")


def fence(text: str, lang: str = "text") -> str:
    """A fenced block longer than any backtick run inside, so the content cannot close it."""
    text = clean_text(text).rstrip("\n")
    ticks = "`" * max(3, max((len(m) for m in re.findall(r"`+", text)), default=0) + 1)
    return f"{ticks}{lang}\n{text}\n{ticks}"


def escape(text: str) -> str:
    """Plain text shown as text: no HTML, no emphasis, no links, no table breaks."""
    return re.sub(r"([\\`*_\[\]<>|#])", r"\\\1", clean_text(text))


def _shorten(text: str, limit: int | None) -> str:
    text = clean_text(text)
    if limit is None or len(text) <= limit:
        return text
    kept = cut(text, limit + 1).removesuffix("…").rstrip()
    return kept + f"\n… ({len(text) - len(kept)} more characters in the full report)"


def _tail(text: str, lines: int) -> str:
    kept = clean_text(text).rstrip("\n").split("\n")
    return "\n".join(kept[-lines:])


def details(summary: str, body: str, *, open_: bool = False) -> str:
    """A collapsed block; the summary is plain text (HTML-escaped), the body Markdown."""
    head = "<details open>" if open_ else "<details>"
    text = html.escape(first_line(summary, 300), quote=False)
    return f"{head}<summary>{text}</summary>\n\n{body}\n\n</details>"
