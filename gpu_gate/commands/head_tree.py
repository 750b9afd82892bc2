"""What the jobs run: with ``--head`` (always in GitHub Actions), a pristine export of the head
commit; without it (local use), the work tree as the user sees it.

A work tree is not a commit: a pull request's own build step (the action's ``setup:``) runs in it and
can leave any bytes there, and a local one holds whatever was not committed. So with ``--head`` the
workers see a work tree of that very commit, made by git into the run's own directory after the
setup commands are over, and the result cache hashes its files. What the setup commands built and
the jobs need (a compiled extension) is taken into it from the work tree only where the policy in
force (the base's) names it, ``setup_outputs``; a file the head commit has keeps the commit's bytes.
"""
from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import os
import shutil
import tempfile
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path

from .. import git
from ..changes import match, may_contain


@dataclasses.dataclass(frozen=True)
class Taken:
    path: str  # repository-relative
    sha256: str
    size: int


@dataclasses.dataclass
class HeadTree:
    """The tree the workers see at the repository's path, and how it was made."""

    path: Path
    commit: str | None  # the commit exported; None: the work tree runs
    taken: list[Taken] = dataclasses.field(default_factory=list)  # setup outputs copied in
    kept: list[str] = dataclasses.field(default_factory=list)  # named, but the commit has them: its bytes kept
    links: list[str] = dataclasses.field(default_factory=list)  # named, but symbolic links: not taken

    @property
    def exported(self) -> bool:
        return self.commit is not None

    def notes(self) -> list[str]:
        """What the report says about the tree that ran."""
        if self.commit is None:
            return []
        notes = [f"the workers ran an export of the head commit {self.commit[:12]}, not the work tree"]
        if self.taken:
            notes.append("setup outputs taken from the work tree: " + ", ".join(
                f"{t.path} (sha256 {t.sha256[:12]})" for t in self.taken[:20]) + _more(self.taken, 20))
        if self.kept:
            notes.append("setup_outputs: not taken, since the head commit has it: " + ", ".join(self.kept[:20])
                         + _more(self.kept, 20))
        if self.links:
            notes.append("setup_outputs: not taken, since it is a symbolic link: " + ", ".join(self.links[:20])
                         + _more(self.links, 20))
        return notes

    def fingerprint(self) -> dict[str, str]:
        """The setup outputs' part of the result cache's key: their bytes change a job's outcome."""
        return {t.path: t.sha256 for t in self.taken}


def _more(items: Sequence[object], shown: int) -> str:
    return f" and {len(items) - shown} more" if len(items) > shown else ""


@contextlib.contextmanager
def head_tree(repo: Path, head: str | None, setup_outputs: Sequence[str], *, work_root: Path | None = None,
              leave_out: Iterable[Path] = ()) -> Iterator[HeadTree]:
    """The head commit checked out by git into a directory of the run's (``work_root``, else the
    system's temporary directory), with the named setup outputs taken from ``repo``'s work tree
    (never from ``leave_out``: the report directory, the result cache); ``head=None``: the work tree."""
    if head is None:
        yield HeadTree(repo, None)
        return
    with commit_tree(repo, head, work_root=work_root) as tree:
        found = HeadTree(tree, head)
        if setup_outputs:
            take_setup_outputs(repo, found, setup_outputs, set(git.list_tree(repo, head)), leave_out)
        yield found


@contextlib.contextmanager
def commit_tree(repo: Path, commit: str, *, work_root: Path | None = None) -> Iterator[Path]:
    """A work tree of ``commit`` made by git in a temporary directory, removed afterwards."""
    tmp = Path(tempfile.mkdtemp(dir=work_root))  # a neutral name: the jobs see this path
    try:
        yield git.add_worktree(repo, commit, tmp / "tree")
    finally:
        if (tmp / "tree").exists():
            git.remove_worktree(repo, tmp / "tree")
        shutil.rmtree(tmp, ignore_errors=True)


def take_setup_outputs(repo: Path, into: HeadTree, globs: Sequence[str], tracked: set[str],
                       leave_out: Iterable[Path] = ()) -> None:
    """Copy the work tree's files that ``globs`` name into the export: regular files only, and never
    one the head commit has (its bytes are the commit's)."""
    skip = {Path(os.path.realpath(p)) for p in leave_out} | {Path(os.path.realpath(repo / ".git"))}
    for rel in sorted(_named(repo, globs, skip)):
        src = repo / rel
        if rel in tracked:
            into.kept.append(rel)
        elif src.is_symlink():
            into.links.append(rel)
        elif src.is_file():
            dest = into.path / rel
            dest.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(src, dest)
            shutil.copymode(src, dest)
            data = dest.read_bytes()
            into.taken.append(Taken(rel, hashlib.sha256(data).hexdigest(), len(data)))


def _named(repo: Path, globs: Sequence[str], skip: set[Path]) -> set[str]:
    """Repository-relative paths under ``repo`` that a glob names (directories are not followed
    through symbolic links, nor into ``skip``)."""
    found: set[str] = set()
    for top, dirs, files in os.walk(repo):
        here = Path(top)
        rel_dir = here.relative_to(repo).as_posix()
        rel_dir = "" if rel_dir == "." else rel_dir
        dirs[:] = sorted(d for d in dirs if Path(os.path.realpath(here / d)) not in skip and
                         any(may_contain(g, f"{rel_dir}/{d}".lstrip("/")) for g in globs))
        for name in files:
            rel = f"{rel_dir}/{name}".lstrip("/")
            if any(match(rel, g) for g in globs):
                found.add(rel)
        for d in dirs:  # a directory that is a symbolic link is named, not followed
            rel = f"{rel_dir}/{d}".lstrip("/")
            if (here / d).is_symlink() and any(match(rel, g) for g in globs):
                found.add(rel)
    return found
