"""What a spec judges, and where the base's kernels are at the head.

A spec judges the kernel files it was seen to launch (the launches recorded by earlier runs, see
:mod:`gpu_gate.coverage`) or, with no record, the kernel files it imports, names or declares in
``covers=``. A kernel file of the base is at the head under the same path, under the path git's rename
detection gives it, or in the files this change wrote that now define its kernels (moved by name): a
kernel survives its file's rename or a move, so the base's spec that judged it still does.
"""
from __future__ import annotations

import functools
import hashlib
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from .. import coverage, cudascan, discovery, git, kernelscan, pyscan
from ..changes import matcher
from ..store import scans as scancache


class Side:
    """One revision's files, read as kernel files or not (the policy's kernel globs, then their content)."""

    def __init__(self, repo: Path, rev: str | None, include: Iterable[str], exclude: Iterable[str]) -> None:
        self.snap = git.Snapshot(repo, rev)
        self._in_globs: Callable[[str], bool] = matcher(list(include), list(exclude))

    @functools.lru_cache(maxsize=None)  # noqa: B019 - one Side per plan, dropped with it
    def kernel_names(self, path: str) -> frozenset[str] | None:
        """The kernels a file defines (empty for C/CUDA: named by path only), or None: not a kernel file."""
        if path not in self.snap.files or not self._in_globs(path):
            return None
        if path.endswith(cudascan.KERNEL_SUFFIXES):
            return frozenset()
        if not path.endswith(".py"):
            return None
        return python_kernels(self.snap.read(path) or b"", path)

    def is_kernel(self, path: str) -> bool:
        return self.kernel_names(path) is not None


def python_kernels(source: bytes, path: str) -> frozenset[str] | None:
    """The kernels a Python file defines, or None: not a kernel file. Each content is read once per
    process (the base's and the head's files are mostly the same bytes) and, with the gate's stores,
    once for all runs (gpu_gate.store.scans)."""
    key = (hashlib.blake2b(source, digest_size=20).digest(), path)
    if key in _READ:
        return _READ[key]
    store = scancache.active
    stored = store.get_kernels(source, path) if store is not None else scancache.MISS
    got: frozenset[str] | None
    if stored is scancache.MISS:
        try:
            found = kernelscan.scan(source, path)
            got = None if found.language is None and not found.unrecognised else frozenset(k.name for k in found.kernels)
        except pyscan.ParseError:
            got = None
        if store is not None:
            store.put_kernels(source, path, got)
    else:
        got = stored if isinstance(stored, frozenset) else None
    if len(_READ) >= _READ_MAX:
        _READ.clear()  # a long-lived process (the pytest plugin) reads on without growing
    _READ[key] = got
    return got


_READ: dict[tuple[bytes, str], frozenset[str] | None] = {}
_READ_MAX = 100_000


def judged_files(spec: discovery.SpecInfo, side: Side, store: coverage.LaunchStore | None) -> frozenset[str]:
    """The kernel files ``spec`` judges at ``side``: declared (``covers=``), else launched (a record
    made on this very content), else imported or named."""
    if spec.covers:
        return frozenset(f for f in side.snap.files if spec.covers_path(f) and side.is_kernel(f))
    static = frozenset(f for f in {*spec.imports, *spec.references} if side.is_kernel(f))
    seen = store.get(coverage.spec_key(spec, side.snap)) if store is not None else None
    if seen is None:
        return static
    return frozenset(f for f in static if not f.endswith(".py")) | frozenset(f for f in seen.files if side.is_kernel(f))


class Moves:
    """Where each kernel file of the base is at the head, and back."""

    def __init__(self, base: Side, head: Side, files: list[git.FileChange]) -> None:
        self.base, self.head = base, head
        self.renamed = {f.old_path: f.path for f in files if f.status == "renamed" and f.old_path}
        self.written = sorted(f.path for f in files if f.status != "deleted")  # head files this change wrote
        self.before = sorted({f.old_path or f.path for f in files})  # base files this change touched

    def at_head(self, path: str) -> frozenset[str]:
        """The head's files that hold the base's kernel file ``path`` now (empty: its kernels are gone)."""
        names = self.base.kernel_names(path)
        if names is None:
            return frozenset()
        target = self.renamed.get(path, path)
        kept = self.head.kernel_names(target)
        out = {target} if kept is not None else set()
        gone = names - (kept or frozenset())
        if gone:
            out |= {p for p in self.written if p != target and (self.head.kernel_names(p) or frozenset()) & gone}
        return frozenset(out)

    def at_base(self, path: str) -> frozenset[str]:
        """The base's kernel files that the head's ``path`` holds (empty: a kernel new in this change)."""
        if not self.head.is_kernel(path):
            return frozenset()
        out = {old for old, new in self.renamed.items() if new == path and self.base.is_kernel(old)}
        if path not in self.renamed and self.base.is_kernel(path):
            out.add(path)
        if path in self.written:
            names = self.head.kernel_names(path) or frozenset()
            out |= {p for p in self.before if p not in out and path in self.at_head(p)
                    and (self.base.kernel_names(p) or frozenset()) & names}
        return frozenset(out)


class Judges:
    """For one change: what each spec judges, the base's spec at the head (through ``moves``)."""

    def __init__(self, moves: Moves, base: dict[str, frozenset[str]], head: dict[str, frozenset[str]]) -> None:
        self.moves = moves
        self.base = base  # base spec id -> the head's files that hold the kernels it judged
        self.head = head  # head spec id -> the kernel files it judges

    @classmethod
    def read(cls, repo: Path, base: tuple[str, Any], head: tuple[str | None, Any], files: list[git.FileChange],
             store: coverage.LaunchStore | None) -> Judges:
        """``base`` and ``head``: (revision, the policy whose spec and kernel globs apply there)."""
        sides = [Side(repo, rev, policy.kernels.include, policy.kernels.exclude) for rev, policy in (base, head)]
        moves = Moves(sides[0], sides[1], files)
        found = [discovery.discover(repo, rev, policy).specs for rev, policy in (base, head)]
        at_base = {s.id: frozenset(h for f in judged_files(s, sides[0], store) for h in moves.at_head(f))
                   for s in found[0]}
        return cls(moves, at_base, {s.id: judged_files(s, sides[1], store) for s in found[1]})
