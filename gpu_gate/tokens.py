"""Whether a changed source file changed what it means: its token stream, comments and layout dropped.

A comment or a blank line edited in a header that 61 kernels include changes none of them. A file is
"modified" for the gate only when the tokens a compiler reads changed: for C/CUDA, every token after
comments are removed, with the end of each preprocessor directive kept (a directive ends at its
line's end); for Python, ``tokenize``'s tokens without comments and non-logical newlines (indentation
and logical line ends are kept: they are syntax). A string's bytes, a docstring's included, count.
A file that cannot be read as either (not UTF-8, not tokenizable) counts as changed.
"""
from __future__ import annotations

import io
import re
import tokenize

from .cudascan import _strip_comments, is_c_source

# Identifiers and numbers, string and character literals, and any other single non-space character.
_C_TOKEN = re.compile(r'[A-Za-z_0-9.]+|"(?:\\.|[^"\\\n])*"|\'(?:\\.|[^\'\\\n])*\'|\S')


def c_tokens(source: bytes) -> list[str]:
    text = _strip_comments(source.decode("utf-8", "strict"))
    out: list[str] = []
    for line in text.splitlines():
        found = _C_TOKEN.findall(line)
        out += found
        if found and found[0] == "#":
            out.append("\n")  # a directive ends with its line
    return out


def python_tokens(source: bytes) -> list[tuple[int, str]]:
    skip = {tokenize.COMMENT, tokenize.NL, tokenize.ENCODING}
    return [(t.type, t.string) for t in tokenize.tokenize(io.BytesIO(source).readline) if t.type not in skip]


def same_meaning(path: str, old: bytes, new: bytes) -> bool:
    """Whether ``old`` and ``new`` (the file ``path`` before and after) differ in comments and layout only."""
    if old == new:
        return True
    try:
        if path.endswith(".py"):
            return python_tokens(old) == python_tokens(new)
        if is_c_source(path):
            return c_tokens(old) == c_tokens(new)
    except (UnicodeDecodeError, tokenize.TokenError, SyntaxError, ValueError):
        return False
    return False
