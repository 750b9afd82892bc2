"""Gate specs found statically (no import, no torch), and which changed kernels they cover.

A spec is a function decorated with ``gpu_gate.spec(...)`` under any alias. What
it covers is, in order: its literal ``covers=[...]`` (paths or globs), else the
kernel files it imports (transitively) and the ``.cu`` files whose paths appear
as string literals in it or in the modules it imports.
"""
from __future__ import annotations

import ast
import dataclasses
import posixpath
from collections.abc import Iterable, Sequence
from pathlib import Path

from . import git, pyscan
from .changes import ChangeSet, ImportGraph, PolicyLike, match, matcher
from .findings import Finding, Severity


@dataclasses.dataclass(frozen=True)
class SpecInfo:
    file: str  # repo-relative spec module
    name: str
    line: int
    covers: tuple[str, ...] = ()  # literal covers=: paths or globs
    imports: frozenset[str] = frozenset()  # repo .py files imported, transitively
    checks: tuple[str, ...] | None = None  # literal checks=, when given
    references: frozenset[str] = frozenset()  # C/CUDA files named by string literals

    @property
    def id(self) -> str:
        return f"{self.file}::{self.name}"

    def covers_path(self, path: str) -> bool:
        if self.covers:
            return any(match(path, pat) for pat in self.covers)
        return path == self.file or path in self.imports or path in self.references

    def names_path(self, path: str) -> bool:
        """Covers it by saying so (covers=, or a .cu path in its code), not only by importing it."""
        if self.covers:
            return any(match(path, pat) for pat in self.covers)
        return path in self.references


@dataclasses.dataclass
class Discovery:
    specs: list[SpecInfo]
    findings: list[Finding]  # spec files that do not parse, unreadable covers=


def is_spec_decorator(qualname: str | None) -> bool:
    return qualname is not None and (qualname == "gpu_gate.spec"
                                     or (qualname.startswith("gpu_gate.") and qualname.endswith(".spec")))


def discover(repo: Path | str, rev: str | None, policy: PolicyLike, *,
             graph: ImportGraph | None = None) -> Discovery:
    """Specs in the files matched by ``policy.specs``, at ``rev`` (None: the work tree).

    ``graph`` (``ChangeSet.import_graph``) saves re-reading modules when ``rev`` is the
    change set's head; parse errors it already recorded are not reported again.
    """
    if not _reusable(graph, repo, rev):
        graph = ImportGraph(git.Snapshot(repo, rev))
    assert graph is not None
    snap = graph.snap
    is_spec = matcher(policy.specs)
    files = sorted(p for p in snap.files if p.endswith(".py") and is_spec(p))
    known_errors = len(graph.errors)
    graph.load(files)
    findings: list[Finding] = list(graph.errors[known_errors:])
    references = _CReferences(graph, snap.files)
    specs: list[SpecInfo] = []
    for path in files:
        tree = graph.trees.get(path)
        if tree is None:
            continue  # did not parse: the graph recorded a parse-error finding
        imports = frozenset(graph.closure(path))
        refs = references.of([path, *imports])
        specs.extend(_specs_in(tree, path, imports, refs, findings))
    return Discovery(specs, findings)


def _reusable(graph: ImportGraph | None, repo: Path | str, rev: str | None) -> bool:
    if graph is None or graph.snap.repo != Path(repo):
        return False
    if rev is None or graph.snap.rev is None:
        return rev is None and graph.snap.rev is None  # both the work tree
    return graph.snap.rev == rev or graph.snap.rev == git.resolve(repo, rev)


def discover_specs(repo: Path | str, rev: str | None, policy: PolicyLike, *,
                   graph: ImportGraph | None = None) -> list[SpecInfo]:
    return discover(repo, rev, policy, graph=graph).specs


def _specs_in(tree: ast.Module, path: str, imports: frozenset[str], refs: frozenset[str],
              findings: list[Finding]) -> list[SpecInfo]:
    aliases = pyscan.import_aliases(tree)
    found: list[SpecInfo] = []
    for fn in pyscan.functions(tree):
        deco = next((d for d in fn.decorator_list if is_spec_decorator(pyscan.qualified_name(d, aliases))), None)
        if deco is None:
            continue
        kw = {k.arg: k.value for k in deco.keywords if k.arg} if isinstance(deco, ast.Call) else {}
        name = _literal_str(kw.get("name")) or fn.name
        covers = _literal_strings(kw.get("covers"), "covers", path, name, findings) or ()
        checks = _literal_strings(kw.get("checks"), "checks", path, name, findings)
        found.append(SpecInfo(path, name, deco.lineno, covers, imports, checks, refs))
    return found


def _literal_str(node: ast.expr | None) -> str | None:
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    return None


def _literal_strings(node: ast.expr | None, key: str, path: str, name: str,
                     findings: list[Finding]) -> tuple[str, ...] | None:
    if node is None:
        return None
    try:
        value = ast.literal_eval(node)
    except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
        value = None
    if isinstance(value, str):
        return (value,)
    if isinstance(value, (list, tuple)) and all(isinstance(v, str) for v in value):
        return tuple(value)
    findings.append(Finding(
        check="coverage", kind="spec-not-static", severity=Severity.WARNING, spec=f"{path}::{name}",
        file=path, line=node.lineno,
        message=f"{path}:{node.lineno}: {key}= of spec {name} is not a literal list of strings, so gpu-gate "
                f"cannot read it without importing the spec (write {key}=[\"...\", ...])"))
    return None


class _CReferences:
    """C/CUDA files whose paths (repo-relative or relative to the module) appear as string literals."""

    def __init__(self, graph: ImportGraph, files: frozenset[str]) -> None:
        self.graph = graph
        self.files = files
        self._per_module: dict[str, frozenset[str]] = {}

    def of(self, modules: Iterable[str]) -> frozenset[str]:
        refs: set[str] = set()
        for module in modules:
            if module not in self._per_module:
                self._per_module[module] = self._scan(module)
            refs |= self._per_module[module]
        return frozenset(refs)

    def _scan(self, module: str) -> frozenset[str]:
        here = posixpath.dirname(module)
        refs: set[str] = set()
        for s in self.graph.c_strings(module):
            for cand in (posixpath.normpath(s.lstrip("/")), posixpath.normpath(posixpath.join(here, s))):
                if cand in self.files:
                    refs.add(cand)
        return frozenset(refs)


# --- coverage --------------------------------------------------------------------------------

def coverage(changeset: ChangeSet, specs: Sequence[SpecInfo]) -> dict[str, list[str]]:
    """Changed kernel path -> ids of the specs that cover it (deleted kernels need none)."""
    result: dict[str, list[str]] = {}
    for k in changeset.kernels:
        if k.status == "deleted":
            continue
        # A header is exercised by whatever exercises a file that includes it.
        targets = [k.path, *changeset.header_includers.get(k.path, ())]
        result[k.path] = [s.id for s in specs if any(s.covers_path(t) for t in targets)]
    return result


def uncovered(coverage_map: dict[str, list[str]], spec_globs: Sequence[str]) -> list[Finding]:
    where = spec_globs[0] if spec_globs else "a path matched by the policy's specs globs"
    return [
        Finding(check="coverage", kind="uncovered", severity=Severity.ERROR, file=path,
                message=f"{path} changed but no gate spec covers it (add a spec under {where} or list it in covers=)")
        for path, ids in sorted(coverage_map.items()) if not ids
    ]


def annotate(changeset: ChangeSet, coverage_map: dict[str, list[str]], specs: Sequence[SpecInfo] = ()) -> None:
    """Record each changed kernel's covering specs on the kernel itself (for the run record)."""
    for k in changeset.kernels:
        k.specs = tuple(coverage_map.get(k.path, ()))
        targets = [k.path, *changeset.header_includers.get(k.path, ())]
        k.declared = tuple(s.id for s in specs if s.id in k.specs and any(s.names_path(t) for t in targets))
