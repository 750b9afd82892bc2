"""The trees a run's jobs see: the head's code (the work tree when it is at head, else a temporary
work tree of the head commit) and, for differential jobs, the base's."""
from __future__ import annotations

import contextlib
import shutil
import tempfile
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from . import output as out
from ..errors import GateError


@contextlib.contextmanager
def head_checkout(repo: Path, head: str | None) -> Iterator[Path]:
    """The jobs run the head's code: the work tree when it is at head, else a temporary work tree."""
    from .. import git

    if head is None or git.resolve(repo, "HEAD") == head:
        yield repo
        return
    tmp = Path(tempfile.mkdtemp())  # a neutral name: the jobs see this path
    out.say(f"head {head[:12]} is not checked out: running its code from a temporary work tree")
    try:
        yield git.add_worktree(repo, head, tmp / "tree")
    finally:
        git.remove_worktree(repo, tmp / "tree")
        shutil.rmtree(tmp, ignore_errors=True)


@contextlib.contextmanager
def base_checkout(repo: Path, base: str | None, jobs: Sequence[Any], record: Any) -> Iterator[Path | None]:
    """The base's code, for the jobs that run it beside the head's on the same cases (differential
    runs): a temporary work tree at the base. Without one, those jobs judge by absolute rules only,
    and the run says so (stricter, never looser)."""
    from .. import git
    from ..protocol.jobs import base_commit

    if base is None or not any(base_commit(j) for j in jobs):
        yield None
        return
    tmp = Path(tempfile.mkdtemp())  # a neutral name: the base's worker sees this path
    try:
        try:
            tree: Path | None = git.add_worktree(repo, base, tmp / "tree")
        except GateError as exc:
            tree = None
            why = f"the base's code could not be checked out ({exc}): failures are judged by absolute rules only"
            out.warn(why)
            record.notes.append(why)
        yield tree
    finally:
        if (tmp / "tree").exists():
            git.remove_worktree(repo, tmp / "tree")
        shutil.rmtree(tmp, ignore_errors=True)
