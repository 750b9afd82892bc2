"""Text that comes from code under review, made fit for a report: capped in size and scrubbed of secrets.

An exception message, a stderr tail or the repr of a value is written by the code under review, which
can read whatever its process can: a checkout's ``.git/config`` with the token ``actions/checkout``
left there, a key under the runner user's home. Before any of it reaches a report (the PR comment,
SARIF, JUnit, ``results.json``) or the console, every such text goes through :func:`text`: secrets in
the formats below become ``[redacted: what]`` and a text longer than its cap is cut at a line or word
boundary with a note saying how much was left out. A scrubbed text says so, where the secret was.
"""
from __future__ import annotations

import base64
import binascii
import dataclasses
import re
from typing import Any

from .findings import Finding, JobResult

# Formats of secrets, by what they are. Kept specific: a scrubber that eats ordinary hex digests or
# tensor values would make reports useless, and what it misses it misses loudly in no way at all.
_PATTERNS: tuple[tuple[str, re.Pattern[str]], ...] = (
    ("private key", re.compile(r"-----BEGIN [A-Z0-9 ]*PRIVATE KEY-----.*?(?:-----END [A-Z0-9 ]*PRIVATE KEY-----|\Z)",
                               re.S)),
    ("authorization header", re.compile(r"(?i)\b(authorization\s*[:=]\s*)(?:basic|bearer|token)\s+[^\s\"']+")),
    ("GitHub token", re.compile(r"\b(?:gh[pousr]_[A-Za-z0-9]{30,}|github_pat_[A-Za-z0-9_]{40,})")),
    ("access token in a URL", re.compile(r"(?i)(?<=://)[^/\s:@]+:[^/\s@]{8,}(?=@)")),
    ("password hash", re.compile(r"\$(?:1|2[abxy]?|5|6|y|gy|7)\$[^\s:$]{0,64}\$[./A-Za-z0-9$]{16,}")),
    ("AWS access key", re.compile(r"\b(?:AKIA|ASIA)[A-Z0-9]{16}\b")),
)
_BASE64_RUN = re.compile(r"[A-Za-z0-9+/]{24,}={0,2}")


def _decoded(run: str) -> str | None:
    try:
        raw = base64.b64decode(run + "=" * (-len(run) % 4), validate=True)
    except (binascii.Error, ValueError):
        return None
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        return None


def _scrub_once(s: str) -> tuple[str, int]:
    found = 0
    for what, rx in _PATTERNS:
        def repl(m: re.Match[str], what: str = what) -> str:
            nonlocal found
            found += 1
            keep = m.group(1) if rx.groups else ""
            return f"{keep}[redacted: {what}]"
        s = rx.sub(repl, s)

    def b64(m: re.Match[str]) -> str:
        nonlocal found
        inner = _decoded(m.group(0))
        if inner is not None and any(rx.search(inner) for _, rx in _PATTERNS):
            found += 1
            return "[redacted: base64 of a secret]"
        return m.group(0)

    return _BASE64_RUN.sub(b64, s), found


def secrets(s: str) -> tuple[str, int]:
    """``s`` with every secret it holds replaced, and how many there were."""
    return _scrub_once(s)


def cap(s: str, limit: int) -> str:
    """``s`` cut to about ``limit`` characters at a line end or a space, never mid-word, with a note."""
    if len(s) <= limit:
        return s
    cut = s.rfind("\n", 0, limit)
    if cut < limit // 2:
        cut = s.rfind(" ", 0, limit)
    if cut < limit // 2:
        cut = limit
    return s[:cut].rstrip() + f" [... {len(s) - cut} more characters left out]"


MESSAGE = 8 << 10  # a finding's message
DETAIL = 32 << 10  # a traceback or a log tail


def text(s: str, limit: int = MESSAGE) -> str:
    """A text from code under review, fit for a report: secrets redacted, then capped."""
    scrubbed, _ = secrets(s)
    return cap(scrubbed, limit)


def value(v: Any, limit: int = DETAIL, depth: int = 0) -> Any:
    """Every string inside a JSON-like value (a finding's details), scrubbed and capped."""
    if isinstance(v, str):
        return text(v, limit)
    if depth > 8:
        return v
    if isinstance(v, dict):
        return {k: value(x, limit, depth + 1) for k, x in v.items()}
    if isinstance(v, list):
        return [value(x, limit, depth + 1) for x in v]
    if isinstance(v, tuple):
        return tuple(value(x, limit, depth + 1) for x in v)
    return v


def finding(f: Finding) -> Finding:
    return dataclasses.replace(f, message=text(f.message), details=value(f.details))


def result(r: JobResult) -> JobResult:
    """A job's result with every text its worker could have written scrubbed and capped."""
    return dataclasses.replace(r, findings=[finding(f) for f in r.findings],
                               reason=text(r.reason) if r.reason else r.reason,
                               log_tail=text(r.log_tail, DETAIL) if r.log_tail else r.log_tail)
