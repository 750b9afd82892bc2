"""Credentials that a checkout keeps where the code under review can read them.

``actions/checkout`` persists its token unless told ``persist-credentials: false``: as an
``http.<url>.extraheader`` (``AUTHORIZATION: basic ...``) in the repository's git config, or in
a file that config includes. Any process that can read the checkout can then push with it.
gpu-gate reports where such a credential sits (never its value); the sandbox keeps it out of
the workers' view.
"""
from __future__ import annotations

import re
from pathlib import Path

from .. import proc

# http.<url>.extraheader, and credentials written into a remote's URL (https://user:token@host/).
_EXTRAHEADER = r"^http\..*extraheader$"
_URL_WITH_SECRET = re.compile(r"^[a-z][a-z0-9+.-]*://[^/@\s]*:[^/@\s]+@", re.I)


def _config_entries(repo: Path, pattern: str) -> list[tuple[str, str, str]]:
    """(origin, key, value) of each config entry matching ``pattern``, includes followed."""
    res = proc.run(["git", "config", "--show-origin", "--includes", "--null", "--get-regexp", pattern],
                   cwd=repo, timeout=30)
    if not res.ok:  # 1: no match; anything else: not a repository, or no git
        return []
    # --null --show-origin prints "origin\0key\nvalue\0" for each entry.
    entries = res.stdout.split("\0")
    out = []
    for origin, keyvalue in zip(entries[0::2], entries[1::2]):
        key, _, value = keyvalue.partition("\n")
        out.append((origin, key, value))
    return out


def credentials_in_checkout(repo: Path) -> list[str]:
    """Where the checkout at ``repo`` holds a credential, one line each ("file: key"); [] if none."""
    found = []
    for origin, key, value in _config_entries(repo, _EXTRAHEADER):
        if value.strip():
            found.append(f"{_origin(origin)}: {key}")
    for origin, key, value in _config_entries(repo, r"^remote\..*\.(push)?url$"):
        if _URL_WITH_SECRET.match(value.strip()):
            found.append(f"{_origin(origin)}: {key} (a password or token in the URL)")
    return found


def _origin(origin: str) -> str:
    return origin.removeprefix("file:")


def warnings(repo: Path) -> list[str]:
    """One warning per persisted credential, saying what to change."""
    return [f"a credential is persisted in the checkout ({where}): code under review can read it. "
            "Check out with `persist-credentials: false` (actions/checkout)" for where in credentials_in_checkout(repo)]
