"""Appending the report to ``$GITHUB_STEP_SUMMARY`` (1 MiB per step, shared with earlier writes)."""
from __future__ import annotations

from pathlib import Path

from .text import SUMMARY_LIMIT, fit_bytes, truncation_note


def append_summary(path: Path, markdown: str, artifacts_url: str | None) -> bool:
    """Append ``markdown`` in what is left of the step's budget. False if nothing fit."""
    used = path.stat().st_size if path.exists() else 0
    room = SUMMARY_LIMIT - used - 2
    if room <= 0:
        return False
    text = fit_bytes(markdown, room, truncation_note(artifacts_url))
    if not text:
        return False
    with path.open("a", encoding="utf-8") as f:
        f.write(("\n" if used else "") + text + "\n")
    return True
