"""The trees a run's jobs see: the head's code (an export of the head commit, or the work tree
without one; see :mod:`.head_tree`), for differential jobs the base's, and the trees the truth
comes from (the rules' revision)."""
from __future__ import annotations

import contextlib
import shutil
import tempfile
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from . import output as out
from ..errors import GateError

if TYPE_CHECKING:
    from ..policy import Policy
    from ..protocol.jobs import Job
    from ..record import RunRecord
    from .check import CheckRequest
    from .head_tree import HeadTree


@contextlib.contextmanager
def head_checkout(repo: Path, head: str | None, policy: Policy, request: CheckRequest) -> Iterator[HeadTree]:
    """The jobs run the head's code: with a head commit, a pristine export of it (never the work tree,
    which a build step could have rewritten), with the setup outputs the policy names; without one,
    the work tree (see :mod:`.head_tree`)."""
    from .head_tree import head_tree

    cache_given = request.plan.cache.dir
    leave_out = [Path(request.output.out).resolve(), *([Path(cache_given).resolve()] if cache_given else []),
                 repo / policy.cache.dir]
    work_root = Path(request.work_dir) if request.work_dir else None
    with head_tree(repo, head, policy.setup_outputs, work_root=work_root, leave_out=leave_out) as tree:
        if tree.exported:
            out.say(f"head {tree.commit[:12] if tree.commit else ''}: the workers run an export of the commit, not "
                    f"the work tree" + (f" ({len(tree.taken)} setup output(s) taken)" if tree.taken else ""))
        yield tree


@contextlib.contextmanager
def base_checkout(repo: Path, base: str | None, jobs: Sequence[Job], record: RunRecord) -> Iterator[Path | None]:
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


@contextlib.contextmanager
def truth_checkout(repo: Path, jobs: Sequence[Job], base: str | None, base_tree: Path | None,
                   record: RunRecord) -> Iterator[dict[str, Path]]:
    """The tree the truth comes from, by commit: the rules' revision (the base branch's tip, see
    gpu_gate.policy.base), whose spec, reference and every repository module they import the reference
    worker loads (see gpu_gate.worker.reference). The differential runs' tree is reused when it is the
    same commit. One that cannot be checked out is left out: a reference that then needs the
    repository's code fails its job closed."""
    from ..protocol.jobs import truth_commit
    from .head_tree import commit_tree

    wanted = sorted({c for j in jobs if (c := truth_commit(j))})
    trees: dict[str, Path] = {}
    with contextlib.ExitStack() as stack:
        for commit in wanted:
            if commit == base and base_tree is not None:
                trees[commit] = base_tree
                continue
            try:
                trees[commit] = stack.enter_context(commit_tree(repo, commit))
            except GateError as exc:
                why = (f"the base's tree at {commit[:12]} could not be checked out ({exc}): a reference that needs the "
                       f"repository's code cannot be computed, and its jobs fail")
                out.warn(why)
                record.notes.append(why)
        yield trees
