"""Which kernels a change touches: ``git diff base...head`` -> kernel files, with propagation.

Kernel files are changed ``.cu``/``.cuh`` files matched by the policy's globs,
and changed Python files in those globs that define GPU kernels in a language
gpu-gate reads (Triton, CuTe DSL, cuTile, TileLang, Numba CUDA, inline CUDA
strings, ...: see :mod:`gpu_gate.kernelscan`). A changed header makes every
kernel that includes it (transitively) affected; a changed Python module makes
every gate spec that imports it (transitively) affected.

What gpu-gate cannot read is refused loudly, never passed as "no kernel
changes": a Python file that uses a GPU module but defines no kernel it
recognises (``unrecognised-kernel``), and a git submodule that moved under the
kernel globs (``submodule-changed``). The policy decides how much they weigh.
"""
from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any, Protocol

import pathspec

from . import artefacts, cudascan, git, kernelscan, pyscan, tokens
from .store import scans as scancache
from .findings import Finding, Severity
from .git import FileChange
from .record import ChangedKernel

_KERNEL_STATUS = {"added": "added", "copied": "added", "modified": "modified", "type_changed": "modified",
                  "renamed": "renamed", "deleted": "deleted"}


class PolicyLike(Protocol):
    """The parts of :class:`gpu_gate.policy.Policy` that change detection reads."""

    kernels: Any  # .include, .exclude: globs
    cuda: Any  # .include_dirs: repo-relative directories

    @property
    def specs(self) -> Sequence[str]: ...


# --- globs ---------------------------------------------------------------------------------

# gitignore semantics come from pathspec: ``*`` stays inside one directory, ``**/`` spans zero or
# more, a pattern without a slash (but a trailing one) matches at any depth, a pattern that names a
# directory matches everything below it, and ``!`` negates an earlier pattern of the same list.
@functools.lru_cache(maxsize=1024)
def _spec(patterns: tuple[str, ...]) -> pathspec.PathSpec[Any]:
    return pathspec.PathSpec.from_lines("gitignore", [p.strip() for p in patterns])


def match(path: str, pattern: str) -> bool:
    """Whether ``path`` (repository-relative, with ``/``) matches the gitignore-style ``pattern``."""
    return _spec((pattern,)).match_file(path)


def matcher(include: Iterable[str], exclude: Iterable[str] = ()) -> Callable[[str], bool]:
    inc, exc = _spec(tuple(include)), _spec(tuple(exclude))
    return lambda path: inc.match_file(path) and not exc.match_file(path)


# --- the change set --------------------------------------------------------------------------

@dataclasses.dataclass
class ChangeSet:
    base: str  # the merge base sha
    head: str | None  # None: the work tree, uncommitted and untracked files included
    files: list[FileChange]
    kernels: list[ChangedKernel]
    # What the change holds that gpu-gate cannot read: files that do not parse, GPU code in no
    # language it recognises, changed submodules. Plan-level findings, all of them.
    parse_errors: list[Finding]
    affected_specs: list[str]  # spec files that import a changed module (transitively)
    changed_modules: list[str] = dataclasses.field(default_factory=list)  # changed .py files
    header_includers: dict[str, tuple[str, ...]] = dataclasses.field(default_factory=dict)
    # Files whose change is in comments and layout only (see gpu_gate.tokens): not changes to judge.
    cosmetic: list[str] = dataclasses.field(default_factory=list)
    # The head's import graph, already partly read; spec discovery at head reuses it.
    import_graph: ImportGraph | None = dataclasses.field(default=None, repr=False, compare=False)

    @property
    def no_kernel_changes(self) -> bool:
        """Nothing under the kernel globs changed that is, or may be, GPU code."""
        return not self.kernels and not any(f.kind in UNREADABLE_KINDS for f in self.parse_errors)

    def kernel(self, path: str) -> ChangedKernel | None:
        return next((k for k in self.kernels if k.path == path), None)


UNRECOGNISED = "unrecognised-kernel"
SUBMODULE = "submodule-changed"
UNREADABLE_KINDS = frozenset({UNRECOGNISED, SUBMODULE})


def parse_error_finding(err: pyscan.ParseError) -> Finding:
    return Finding(check="changes", kind="parse-error", message=str(err), severity=Severity.ERROR,
                   file=err.file, line=err.line)


def detect(repo: Path | str, base: str, head: str | None, policy: PolicyLike) -> ChangeSet:
    """Kernel changes on ``head`` since it branched from ``base`` (three-dot). With ``head=None``,
    the work tree against the point where ``HEAD`` branched from ``base``: what the user sees,
    uncommitted and untracked files included."""
    root = Path(repo)
    merge_base = git.merge_base(root, base, head or "HEAD")
    head_sha = git.resolve(root, head) if head is not None else None
    snap = git.Snapshot(root, head_sha)
    files, cosmetic = _meaningful(root, merge_base, git.diff(root, merge_base, head_sha), snap)
    is_kernel_path = matcher(policy.kernels.include, policy.kernels.exclude)
    errors: list[Finding] = []

    kernels = _direct_kernels(root, merge_base, files, snap, is_kernel_path, errors)
    # compiled artefacts (.so, .cubin, .ptx, ...): GPU code whose source gpu-gate cannot read (see artefacts)
    binaries, binary_errors = artefacts.changed(files, policy.kernels.include, policy.kernels.exclude, _KERNEL_STATUS)
    kernels.update({p: k for p, k in binaries.items() if p not in kernels})
    errors += binary_errors
    errors += submodule_findings(files, policy.kernels.include, policy.kernels.exclude)
    includers = _header_propagation(files, snap, is_kernel_path, policy, kernels)
    modules = sorted(f.path for f in files if f.path.endswith(".py"))
    graph = ImportGraph(snap)
    affected = _affected_specs(snap, graph, policy.specs, files)
    ordered = sorted(kernels.values(), key=lambda k: k.path)
    return ChangeSet(merge_base, head_sha, files, ordered, _dedupe(errors + graph.errors), affected, modules,
                     includers, cosmetic, graph)


def _meaningful(root: Path, merge_base: str, files: list[FileChange], snap: git.Snapshot
                ) -> tuple[list[FileChange], list[str]]:
    """The changes that change what a file means, and the paths of those in comments and layout only
    (a source modified in place whose token stream is the same: see :mod:`gpu_gate.tokens`)."""
    edited = [f for f in files if f.status in ("modified", "type_changed") and not f.binary and f.gitlink is None
              and (f.path.endswith(".py") or cudascan.is_c_source(f.path))]
    if not edited:
        return files, []
    old = git.Snapshot(root, merge_base).read_many(f.path for f in edited)
    new = snap.read_many(f.path for f in edited)
    cosmetic = {f.path for f in edited if f.path in old and f.path in new
                and tokens.same_meaning(f.path, old[f.path], new[f.path])}
    return [f for f in files if f.path not in cosmetic], sorted(cosmetic)


def _dedupe(findings: list[Finding]) -> list[Finding]:
    seen: dict[tuple[str | None, int | None], Finding] = {}
    for f in findings:
        seen.setdefault((f.file, f.line), f)
    return sorted(seen.values(), key=lambda f: (f.file or "", f.line or 0))


def _direct_kernels(root: Path, merge_base: str, files: list[FileChange], snap: git.Snapshot,
                    is_kernel_path: Callable[[str], bool], errors: list[Finding]) -> dict[str, ChangedKernel]:
    kernels: dict[str, ChangedKernel] = {}
    candidates = [f for f in files if is_kernel_path(f.path) and f.gitlink is None]
    for f in candidates:
        if f.path.endswith(cudascan.KERNEL_SUFFIXES):
            kernels[f.path] = ChangedKernel(f.path, "cuda", _KERNEL_STATUS[f.status])
    py_live = [f for f in candidates if f.path.endswith(".py") and f.status != "deleted" and not f.binary]
    contents = snap.read_many(f.path for f in py_live)
    for f in py_live:
        found = _scan(f.path, contents.get(f.path, b""), errors)
        kernel = _python_kernel(f.path, found, _KERNEL_STATUS[f.status]) if found else None
        if kernel is not None:
            kernels[f.path] = kernel
        if found is not None and found.unrecognised:
            errors.append(unrecognised_finding(f.path, found))
    py_gone = [f for f in candidates if f.path.endswith(".py") and f.status == "deleted"]
    if py_gone:
        old = git.Snapshot(root, merge_base).read_many(f.path for f in py_gone)
        for f in py_gone:
            # A deleted file's parse errors, or its unreadable GPU code, are not the head's problem.
            found = _scan(f.path, old.get(f.path, b""), [])
            kernel = _python_kernel(f.path, found, "deleted") if found else None
            if kernel is not None:
                kernels[f.path] = kernel
    return kernels


def _scan(path: str, source: bytes, errors: list[Finding]) -> kernelscan.Scan | None:
    try:
        return kernelscan.scan(source, path)
    except pyscan.ParseError as err:
        errors.append(parse_error_finding(err))
        return None


def _python_kernel(path: str, found: kernelscan.Scan, status: str) -> ChangedKernel | None:
    """A Python file with kernels, or with GPU code and no kernel gpu-gate can name ("unrecognised"):
    the latter is still a kernel file, so the specs that cover it run and coverage applies."""
    if found.language is not None:
        return ChangedKernel(path, found.language, status, functions=tuple((k.name, k.line) for k in found.kernels))
    if found.unrecognised:
        return ChangedKernel(path, "unrecognised", status)
    return None


def unrecognised_finding(path: str, found: kernelscan.Scan) -> Finding:
    first = found.gpu_uses[0]
    modules = ", ".join(found.gpu_modules)
    return Finding(
        check="changes", kind=UNRECOGNISED, severity=Severity.ERROR, file=path, line=first.line,
        details={"modules": found.gpu_modules, "uses": [u.name for u in found.gpu_uses[:10]]},
        message=(f"{path} uses {modules} ({first.name}, line {first.line}) but gpu-gate recognises no kernel in it, so "
                 f"it cannot tell which GPU code changed: name the file in a gate spec's covers= and set "
                 f"`unrecognised: warn` in the base policy, or move it out of kernels.include (and please report "
                 f"the kernel style it uses)"))


# --- submodules --------------------------------------------------------------------------------

def submodule_findings(files: list[FileChange], include: Iterable[str], exclude: Iterable[str]) -> list[Finding]:
    """Git submodules (gitlinks) that moved under the kernel globs: gpu-gate cannot see inside them."""
    out: list[Finding] = []
    excluded = matcher(exclude)
    for f in files:
        if f.gitlink is None or excluded(f.path) or not any(may_contain(p, f.path) for p in include):
            continue
        old, new = (sha[:12] if sha.strip("0") else "nothing" for sha in f.gitlink)
        what = {"added": f"that was added at {new}", "deleted": f"that was removed (it was at {old})"}.get(
            f.status, f"that moved from {old} to {new}")
        out.append(Finding(
            check="changes", kind=SUBMODULE, severity=Severity.ERROR, file=f.path,
            details={"old": f.gitlink[0], "new": f.gitlink[1], "status": f.status},
            message=(f"{f.path} is a git submodule {what}, under kernels.include; gpu-gate cannot see the kernels "
                     f"inside a submodule: gate them in its own repository, then set `submodules: warn` in the "
                     f"base policy, or list the path under kernels.exclude")))
    return out


def may_contain(pattern: str, directory: str) -> bool:
    """Whether some file below ``directory`` could match the gitignore-style ``pattern``."""
    pat = pattern.strip()
    if "/" not in pat.rstrip("/"):
        return True  # matches at any depth
    if match(directory, pat):
        return True  # the pattern names the directory or one above it
    return _components_may_match(pat.strip("/").split("/"), directory.split("/"))


def _components_may_match(pattern: list[str], path: list[str]) -> bool:
    """Can ``pattern`` match a path that starts with ``path`` and goes deeper?"""
    if not path:
        return bool(pattern)
    if not pattern:
        return False
    if pattern[0] == "**":
        return _components_may_match(pattern[1:], path) or _components_may_match(pattern, path[1:])
    # one component against one path component: anchored, so that it cannot match deeper
    return match(path[0], "/" + pattern[0]) and _components_may_match(pattern[1:], path[1:])


def _header_propagation(files: list[FileChange], snap: git.Snapshot, is_kernel_path: Callable[[str], bool],
                        policy: PolicyLike, kernels: dict[str, ChangedKernel]) -> dict[str, tuple[str, ...]]:
    changed_c = [f for f in files if cudascan.is_c_source(f.path)]
    if not changed_c:
        return {}
    # Deleted and renamed-away headers still resolve, so their includers are affected too.
    gone = {f.old_path for f in files if f.status == "renamed" and f.old_path}
    gone |= {f.path for f in files if f.status == "deleted"}
    universe = snap.files | gone
    sources = snap.read_many(p for p in snap.files if cudascan.is_c_source(p))
    graph = cudascan.include_graph(sources, tuple(policy.cuda.include_dirs), universe)
    result: dict[str, tuple[str, ...]] = {}
    for changed in sorted({f.path for f in changed_c} | {f.old_path for f in changed_c if f.old_path}):
        users = cudascan.includers(changed, graph)
        result[changed] = tuple(sorted(users))
        for user in users:
            if not user.endswith(cudascan.KERNEL_SUFFIXES) or not is_kernel_path(user):
                continue
            k = kernels.get(user)
            if k is None:
                kernels[user] = ChangedKernel(user, "cuda", "affected", via=(changed,))
            elif k.status == "affected" and changed not in k.via:
                k.via = tuple(sorted((*k.via, changed)))
    return {h: u for h, u in result.items() if u}


def _affected_specs(snap: git.Snapshot, graph: ImportGraph, spec_globs: Sequence[str],
                    files: list[FileChange]) -> list[str]:
    changed = {f.path for f in files if f.path.endswith(".py")}
    changed |= {f.old_path for f in files if f.old_path and f.old_path.endswith(".py")}
    if not changed:
        return []
    is_spec = matcher(spec_globs)
    specs = sorted(p for p in snap.files if p.endswith(".py") and is_spec(p))
    graph.load(specs)
    touched = graph.importers(changed) | changed
    return [s for s in specs if s in touched]


_EAGER_AFTER_ROUNDS = 4


class ImportGraph:
    """Transitive imports inside one snapshot, read breadth first in batches (one git call a level)."""

    def __init__(self, snap: git.Snapshot) -> None:
        self.snap = snap
        self.index = pyscan.ModuleIndex(snap.files)
        self.errors: list[Finding] = []  # modules that do not parse
        self.direct: dict[str, set[str]] = {}
        self.trees = _Trees()
        self._c_strings: dict[str, frozenset[str]] = {}
        self.store = scancache.active  # what earlier runs read (see gpu_gate.store.scans)

    def closure(self, start: str) -> set[str]:
        """Repository files ``start`` imports, directly or not (``start`` itself excluded)."""
        self.load([start])
        seen: set[str] = set()
        todo = [start]
        while todo:
            for dep in self.direct.get(todo.pop(), ()):
                if dep not in seen and dep != start:
                    seen.add(dep)
                    todo.append(dep)
        return seen

    def importers(self, targets: set[str]) -> set[str]:
        """Loaded modules that import any of ``targets``, directly or not."""
        reverse: dict[str, set[str]] = {}
        for module, deps in self.direct.items():
            for dep in deps:
                reverse.setdefault(dep, set()).add(module)
        seen: set[str] = set()
        todo = list(targets)
        while todo:
            for parent in reverse.get(todo.pop(), ()):
                if parent not in seen:
                    seen.add(parent)
                    todo.append(parent)
        return seen

    def load(self, starts: Iterable[str]) -> None:
        frontier = [s for s in starts if s not in self.direct]
        rounds = 0
        while frontier:
            rounds += 1
            if rounds == _EAGER_AFTER_ROUNDS:
                # Deep import chains would cost one git call per level: read all the rest at once.
                self.snap.read_many(p for p in self.snap.files if p.endswith(".py") and p not in self.direct)
            contents = self.snap.read_many(frontier)
            nxt: set[str] = set()
            for path in frontier:
                deps = self._scan(path, contents.get(path))
                self.direct[path] = deps
                nxt |= {d for d in deps if d not in self.direct}
            frontier = sorted(nxt)

    def _scan(self, path: str, source: bytes | None) -> set[str]:
        if source is None:
            return set()
        known = self.store.get(source, path) if self.store is not None else None
        if known is not None:
            names, self._c_strings[path] = known
            self.trees.later(path, source)  # parsed if someone asks for the tree (a spec file)
        else:
            try:
                tree = pyscan.parse(source, path)
            except pyscan.ParseError as err:
                self.errors.append(parse_error_finding(err))
                return set()
            self.trees[path] = tree
            names = frozenset(pyscan.imported_names(tree, path))
            self._c_strings[path] = frozenset(s for s in pyscan.string_literals(tree) if _names_c_file(s))
            if self.store is not None:
                self.store.put(source, path, names, self._c_strings[path])
        return pyscan.files_of(names, path, self.index)

    def c_strings(self, module: str) -> frozenset[str]:
        """The string constants of a loaded module that could name a C/CUDA file."""
        return self._c_strings.get(module, frozenset())


def _names_c_file(s: str) -> bool:
    return cudascan.is_c_source(s) and "\n" not in s


class _Trees(dict[str, object]):
    """Parsed modules by path; those read from the scan store are parsed when first asked for."""

    def __init__(self) -> None:
        super().__init__()
        self._sources: dict[str, bytes] = {}

    def later(self, path: str, source: bytes) -> None:
        self._sources[path] = source

    def get(self, path: str, default: Any = None) -> Any:
        if path not in self and path in self._sources:
            try:
                self[path] = pyscan.parse(self._sources.pop(path), path)
            except pyscan.ParseError:
                return default  # parsed before with the same bytes: not reached
        return super().get(path, default)
