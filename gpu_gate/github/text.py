"""Fitting text into GitHub's size limits without breaking it mid-character."""
from __future__ import annotations

COMMENT_LIMIT = 65536  # characters in an issue or PR comment body
CHECK_TEXT_LIMIT = 65535  # characters in a check run's output.summary and output.text
SUMMARY_LIMIT = 1024 * 1024  # bytes of $GITHUB_STEP_SUMMARY per step


def truncation_note(url: str | None) -> str:
    where = f"[the run's artifacts]({url})" if url else "the run's artifacts"
    return f"\n\n---\n*Report truncated to fit GitHub's size limit: the full report is in {where}.*\n"


def fit_chars(text: str, limit: int, note: str) -> str:
    """``text`` unchanged if it fits in ``limit`` characters, else cut at a line and noted."""
    if len(text) <= limit:
        return text
    keep = max(limit - len(note), 0)
    head = text[:keep]
    cut = head.rfind("\n")
    if cut > keep // 2:
        head = head[:cut]
    return (head + note)[:limit]


def fit_bytes(text: str, limit: int, note: str) -> str:
    """Like :func:`fit_chars`, counting UTF-8 bytes (the step summary's unit)."""
    data = text.encode("utf-8")
    if len(data) <= limit:
        return text
    note_bytes = note.encode("utf-8")
    keep = max(limit - len(note_bytes), 0)
    head = data[:keep].decode("utf-8", errors="ignore")
    cut = head.rfind("\n")
    if cut > len(head) // 2:
        head = head[:cut]
    out = head + note
    return out if len(out.encode("utf-8")) <= limit else head
