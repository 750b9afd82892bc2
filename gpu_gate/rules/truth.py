"""Plan time: what the change does to the code the truth is computed with.

The reference worker loads the base's spec, its reference and every repository module they import
from the base's tree (see :mod:`gpu_gate.worker.reference`), so no edit of the head's can change the
truth. Two edits are still shown, read from git without importing anything:

- a repository module that the base's reference reaches through other modules (``gate/common.py``
  imports ``gate/util.py``) and that this change modifies: the base's still computes the truth, and
  the reviewer is told (``rules-changed``; a module the reference names itself is specdiff's);
- a module the base's spec imports that was no module of the repository at the base (an installed
  package) and is one at the head: the repository would come first on the workers' ``sys.path``,
  where the head's own package judges the head. A ``rules-weakened`` finding: it blocks unless the
  base's policy says ``rule_changes: warn``.
"""
from __future__ import annotations

import sys
from collections.abc import Iterable, Sequence
from pathlib import Path

from .. import git
from ..changes import ImportGraph
from .change import RuleChange
from .specrules import SpecRules

# What can never stand in for an installed package in a worker: the standard library comes before the
# repository on sys.path, gpu-gate runs from its own installation, and torch and numpy are imported
# before the repository is on sys.path (see worker.loader.user_path).
_NEVER_SHADOWED = frozenset(sys.stdlib_module_names) | {"gpu_gate", "torch", "numpy", "__future__"}


class TruthTree:
    """The rules' revision (the base branch's tip) as the reference worker will load it."""

    def __init__(self, repo: Path, rev: str) -> None:
        self.snap = git.Snapshot(repo, rev)
        self.graph = ImportGraph(self.snap)

    def reached(self, spec: SpecRules) -> dict[str, str]:
        """Repository files the spec's reference reaches through the modules it names: file -> the
        module it names that leads there."""
        node = spec.keywords.get("reference")
        if node is None:
            return {}
        out: dict[str, str] = {}
        for direct in sorted(spec.modules_used(node, self.graph.index)):
            for file in sorted(self.graph.closure(direct)):
                out.setdefault(file, direct)
        return out

    def imported_tops(self, spec: SpecRules) -> dict[str, str]:
        """Top-level names the spec module and the repository modules it imports import: name -> the file
        that imports it."""
        from .. import pyscan
        from ..store import scans

        files = [spec.file, *sorted(self.graph.closure(spec.file))]
        sources = self.snap.read_many(files)
        out: dict[str, str] = {}
        for file in files:
            raw = sources.get(file)
            if raw is None:
                continue
            # what an earlier read of these bytes found (the import graph's own store), else a parse
            known = scans.active.get(raw, file) if scans.active is not None else None
            if known is not None:
                names: set[str] = set(known[0])
            else:
                try:
                    names = pyscan.imported_names(pyscan.parse(raw, file), file)
                except pyscan.ParseError:
                    continue
            for name in sorted(names):
                out.setdefault(name.split(".")[0], file)
        return out


def helpers_changed(spec: SpecRules, tree: TruthTree, changed: set[str]) -> list[RuleChange]:
    """The reference's code, reached through another module, that this change modifies."""
    out = []
    for file, via in sorted(tree.reached(spec).items()):
        if file in changed:
            out.append(RuleChange("changed", f"spec {spec.name}: the reference's code in {file} (reached through "
                                             f"{via}) is modified by this change; the truth is computed with the "
                                             f"base's (review the change, and land it on the base branch first if "
                                             f"the truth should change)", spec.file, spec.line_of("reference"),
                                  spec.id))
    return out


def shadowed_packages(spec: SpecRules, tree: TruthTree, head_files: Iterable[str],
                      roots: Sequence[str]) -> list[RuleChange]:
    """Installed packages the base's spec imports that the head's repository now has a module for."""
    base_files, head = frozenset(tree.snap.files), frozenset(head_files)
    out = []
    for top, importer in sorted(tree.imported_tops(spec).items()):
        if top in _NEVER_SHADOWED or local_module(base_files, top, roots) is not None:
            continue
        found = local_module(head, top, roots)
        if found is not None:
            out.append(RuleChange("weakened", f"spec {spec.name}: {top!r} was an installed package at the base "
                                              f"(imported by {importer}) and is a module of the repository at the "
                                              f"head ({found}): on the workers' sys.path the repository comes "
                                              f"first, so the head's own {top!r} would stand in for it (the truth "
                                              f"is computed from the base's tree and the installed package; "
                                              f"rename the module)", found, None, spec.id))
    return out


def local_module(files: frozenset[str], top: str, roots: Sequence[str]) -> str | None:
    """The repository file that ``import top`` finds first from the python_path ``roots``: a module,
    a regular package, or an extension module (a namespace directory never hides an installed
    package: Python takes a regular one found anywhere on sys.path first)."""
    for root in roots or ("",):
        prefix = f"{root.strip('/')}/" if root.strip("/") else ""
        for cand in (f"{prefix}{top}.py", f"{prefix}{top}/__init__.py"):
            if cand in files:
                return cand
        stem = f"{prefix}{top}."
        for f in sorted(files):
            if f.startswith(stem) and "/" not in f[len(stem):] and f.endswith((".so", ".pyd")):
                return f
    return None
