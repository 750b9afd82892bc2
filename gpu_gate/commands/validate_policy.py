"""``gpu-gate validate-policy``: every problem of a policy file as ``path:line:col``; exit 0 if it is
valid, 2 if not. No torch."""
from __future__ import annotations

import os
from pathlib import Path

from . import output as out
from ..exitcodes import ExitCode


def run(path: Path | None, *, strict: bool = False, staged: bool = False, repo: Path | None = None) -> int:
    from ..policy import validate_policy_file
    from ..report.console import paint

    if staged:
        code, lines = _validate_staged(path, strict, repo)
    else:
        code, lines = validate_policy_file(path or Path(".gpu-gate.yml"), strict=strict)
    if code != 0:
        for line in lines:
            out.error(line)
        return code
    for line in lines[:-1]:  # warnings; the last line says the file is valid
        out.say(line)
    out.verdict(lines[-1].replace(": valid", ": " + paint("valid", "green", out.colour()), 1))
    return code


def _validate_staged(path: Path | None, strict: bool, repo: Path | None) -> tuple[int, list[str]]:
    """The policy as the next commit would record it: read from the index, not the work tree."""
    from .. import git
    from ..policy.loader import find_in, validate_in
    from ..policy.tree import GitTree
    from .planning import repo_root

    root = repo_root(repo)
    _, staged = git.staged_commits(root)
    tree = GitTree(root, staged, label="")
    rel = Path(os.path.relpath(os.path.abspath(path), root)).as_posix() if path else find_in(tree)[0]
    if rel is None or rel.startswith("../") or not tree.exists(rel):
        shown = rel or ".gpu-gate.yml"
        return int(ExitCode.PASSED), [f"{shown}: not staged; nothing to validate (without a policy file the default "
                                      f"preset applies)"]
    return validate_in(tree, rel, strict=strict)
