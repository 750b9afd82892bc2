"""Which specs a change runs, and which changed kernels they really cover.

**Selection.** A spec runs when anything that can alter its result changed: the spec file
itself; any Python module in its import closure inside the repository (the wrapper that
computes the grid, passes strides, allocates the output or picks a block size); a kernel it
covers; or a module it imports that the change deletes. Each reason is kept in words
("imports kernels/ops.py, changed") for the console, the report and ``list-kernels``.

**Coverage.** Which specs exercise a changed kernel. The static guess is the import closure
(plus ``covers=`` and ``.cu`` paths named in the spec's modules). A package ``__init__`` that
re-exports every op makes every spec import every kernel, so for Triton kernels what a spec
was seen to launch (recorded in the job by :mod:`gpu_gate.worker.launches`, with the ``@triton.jit``
helpers compiled into each launched kernel) replaces the guess once known:

- after a run, this run's launches decide (:func:`revise`): a changed Triton kernel that the
  specs importing it ran without launching is ``uncovered``, and the report says what they
  launched instead;
- before a run, launches recorded by earlier runs (kept beside the result cache, keyed by the
  content of the spec and its import closure) predict it (:func:`predict`), so ``plan`` and
  ``list-kernels`` already show it, without torch.

Selection stays with the import closure: a kernel file often holds host code too, so a spec
that imports a changed file still runs, and its launches then decide coverage. With one exception
(:func:`narrow`): where the change to a Triton file is confined to the bodies of its ``@triton.jit``
functions (the same imports, host code, globals, decorators and signatures), and a spec's recorded
launches on this code show none of that file's kernels (nor a helper of it compiled into a kernel it
launched), the spec cannot see the change: a kernel's body runs only where it is launched. It does
not run, the plan says so, and a kernel that no remaining spec covers is ``uncovered`` at once. A
change to one op behind a re-exporting ``__init__`` then runs only the specs that launch it.
"""
from __future__ import annotations

import ast
import dataclasses
import hashlib
import json
import os
import tempfile
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from . import git, pyscan
from .changes import ChangeSet, ImportGraph
from .discovery import SpecInfo
from .findings import Finding, JobResult, Severity

LAUNCH_FORMAT = 1


# --- selection -------------------------------------------------------------------------------

_VERB = {"added": "added", "copied": "added", "modified": "changed", "type_changed": "changed",
         "renamed": "renamed", "deleted": "deleted"}


def select(cs: ChangeSet, specs: Sequence[SpecInfo], cov: dict[str, list[str]]) -> dict[str, list[str]]:
    """Spec id -> why it runs, for every spec that something in this change can affect."""
    changed = {f.path: f for f in cs.files if f.status != "deleted"}
    kernels = {k.path: k for k in cs.kernels}
    covering: dict[str, list[str]] = {}
    for path, ids in cov.items():
        for sid in ids:
            covering.setdefault(sid, []).append(path)
    why: dict[str, list[str]] = {}
    for s in specs:
        reasons: list[str] = []
        own = changed.get(s.file)
        if own is not None:
            reasons.append(f"the spec file is {_VERB[own.status]}")
        for path in sorted(covering.get(s.id, ())):
            k = kernels[path]
            via = f" via {', '.join(k.via)}" if k.via else ""
            reasons.append(f"covers {path} ({k.language}, {k.status}{via})")
        named = set(covering.get(s.id, ()))
        for path in sorted(s.imports):
            f = changed.get(path)
            if f is not None and path not in named:
                reasons.append(f"imports {path}, {_VERB[f.status]}")
        if reasons:
            why[s.id] = reasons
    return why


def deleted_imports(cs: ChangeSet, specs: Sequence[SpecInfo], graph: ImportGraph,
                    base_files: Iterable[str]) -> tuple[dict[str, list[str]], list[Finding]]:
    """Specs that import (directly or through their closure) a module this change deletes or
    renames away: each is selected, and each such import is a ``spec-import-error`` finding
    at its line (a warning where a ``try`` guards it, as optional imports are)."""
    gone = {f.path for f in cs.files if f.status == "deleted" and f.path.endswith(".py")}
    gone |= {f.old_path for f in cs.files if f.status == "renamed" and f.old_path and f.old_path.endswith(".py")}
    gone -= graph.snap.files
    if not gone:
        return {}, []
    base_index = pyscan.ModuleIndex(base_files)
    broken: dict[str, list[tuple[int, str, str, bool]]] = {}  # module -> (line, name, gone file, guarded)
    why: dict[str, list[str]] = {}
    findings: list[Finding] = []
    for s in specs:
        for module in sorted({s.file, *s.imports}):
            if module not in broken:
                broken[module] = _broken_imports(graph, module, base_index, gone)
            for line, name, target, guarded in broken[module]:
                why.setdefault(s.id, []).append(f"imports {target}, deleted")
                findings.append(Finding(
                    check="changes", kind="spec-import-error", spec=s.id, file=module, line=line,
                    severity=Severity.WARNING if guarded else Severity.ERROR,
                    message=f"{module}:{line}: imports {name}, but this change deletes {target}: spec {s.name} "
                            f"cannot import it (restore the module, or change the import"
                            f"{' ' if guarded else ' and the spec'} to what replaces it)"))
    return {k: sorted(set(v)) for k, v in why.items()}, findings


def _broken_imports(graph: ImportGraph, module: str, base_index: pyscan.ModuleIndex,
                    gone: set[str]) -> list[tuple[int, str, str, bool]]:
    tree = graph.trees.get(module)
    if tree is None:
        return []
    out = []
    for node, guarded in _imports_with_guard(tree):
        for name in pyscan.imported_names(ast.Module(body=[node], type_ignores=[]), module):
            if graph.index.module_files(name):
                continue  # still resolves at head
            hits = [f for f in base_index.module_files(name) if f in gone]
            if hits:
                out.append((node.lineno, name, hits[-1], guarded))
    return out


def _imports_with_guard(tree: ast.Module) -> list[tuple[ast.stmt, bool]]:
    found: list[tuple[ast.stmt, bool]] = []

    def walk(node: ast.AST, guarded: bool) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.Import, ast.ImportFrom)):
                found.append((child, guarded))
            walk(child, guarded or isinstance(child, ast.Try))

    walk(tree, False)
    return found


# --- what specs launched ---------------------------------------------------------------------

@dataclasses.dataclass(frozen=True)
class Launched:
    """What one spec launched: files of launched kernels and of the helpers compiled into them."""

    files: frozenset[str]
    kernels: tuple[str, ...]  # "file::function"
    reads: frozenset[str] = frozenset()  # repository files the candidate opened or loaded (worker.reads)

    @classmethod
    def from_json(cls, d: Any) -> Launched | None:
        if not isinstance(d, dict) or not isinstance(d.get("files"), list):
            return None
        kernels = [f"{k.get('file')}::{k.get('name')}" for k in d.get("kernels", []) if isinstance(k, dict)]
        from .read_files import clean

        return cls(frozenset(str(f) for f in d["files"]), tuple(kernels), clean(d.get("reads")))

    def merge(self, other: Launched) -> Launched:
        return Launched(self.files | other.files, tuple(sorted(set(self.kernels) | set(other.kernels))),
                        self.reads | other.reads)

    def describe(self) -> str:
        return ", ".join(self.kernels) if self.kernels else "no kernel of this repository"


def launched_by_spec(results: Iterable[JobResult]) -> dict[str, Launched]:
    """Spec id -> what its jobs launched, from the results that recorded launches."""
    out: dict[str, Launched] = {}
    for r in results:
        got = Launched.from_json(r.extra.launches) if r.spec else None
        if got is not None and r.spec is not None:
            out[r.spec] = out[r.spec].merge(got) if r.spec in out else got
    return out


def launch_key(spec_id: str, object_ids: dict[str, str]) -> str:
    """A spec's launches are a function of the spec and the code it imports: key by their content."""
    from . import __version__

    doc = {"format": LAUNCH_FORMAT, "gpu_gate": __version__, "spec": spec_id, "files": dict(sorted(object_ids.items()))}
    return hashlib.sha256(json.dumps(doc, sort_keys=True).encode()).hexdigest()


def spec_key(spec: SpecInfo, snap: git.Snapshot) -> str:
    return launch_key(spec.id, snap.object_ids([spec.file, *spec.imports]))


class LaunchStore:
    """Launches recorded by earlier runs, beside the result cache. Written by the gate process
    only, after its jobs have ended; an entry is only a prediction (see :func:`revise`)."""

    def __init__(self, cache_dir: Path) -> None:
        self.dir = cache_dir / "launches"

    def is_empty(self) -> bool:
        try:
            return not any(self.dir.iterdir())
        except OSError:
            return True

    def get(self, key: str, trusted: bool = False) -> Launched | None:
        """What the spec launched on this content, on every device recorded; ``trusted``: only as
        recorded by runs of the base's own commit (see ``put``)."""
        try:
            doc = json.loads((self.dir / f"{key}.json").read_text())
        except (OSError, ValueError):
            return None
        devices = doc.get("trusted" if trusted else "devices") if isinstance(doc, dict) else None
        seen = [Launched.from_json(v) for v in (devices if isinstance(devices, dict) else {}).values()]
        got = [s for s in seen if s is not None]
        if not got:
            return None
        merged = got[0]
        for more in got[1:]:
            merged = merged.merge(more)
        return merged

    def put(self, key: str, spec_id: str, device: str, launches: dict[str, object], trusted: bool = False) -> None:
        """``trusted``: recorded by a run of the base's own commit, whose workers ran only trusted
        code. Kept apart from the others: a pull request's run, whose code under review says what it
        launched, never replaces it."""
        path = self.dir / f"{key}.json"
        try:
            doc = json.loads(path.read_text()) if path.exists() else {}
        except (OSError, ValueError):
            doc = {}
        doc = doc if isinstance(doc, dict) else {}
        devices = dict(doc.get("devices") or {})
        devices[device] = launches
        kept = dict(doc.get("trusted") or {})
        if trusted:
            kept[device] = launches
        try:
            self.dir.mkdir(parents=True, exist_ok=True)
            fd, tmp = tempfile.mkstemp(dir=self.dir, suffix=".tmp")
            with os.fdopen(fd, "w") as f:
                json.dump({"spec": spec_id, "devices": devices, "trusted": kept}, f, sort_keys=True)
            os.replace(tmp, path)
        except OSError:
            pass  # a prediction only: a full disk must not fail the gate


# --- before the run: predict -----------------------------------------------------------------

@dataclasses.dataclass
class Prediction:
    """Static coverers that earlier runs saw launch none of a kernel's code."""

    kernel: str
    specs: dict[str, Launched]  # spec id -> what it was seen to launch


def predict(cs: ChangeSet, specs: Sequence[SpecInfo], cov: dict[str, list[str]], store: LaunchStore,
            base_tree: dict[str, str]) -> tuple[dict[str, list[str]], list[Prediction]]:
    """Refine the static coverage of changed Triton kernels with recorded launches.

    A spec's record applies if it was made on exactly the head's content, or on the base's
    content (``base_tree``: path -> blob id at the merge base) when the change touched nothing
    in the spec's closure but Triton files it did not launch: only then can the change not have
    altered what it launches."""
    by_id = {s.id: s for s in specs}
    changed = {f.path for f in cs.files} | {f.old_path for f in cs.files if f.old_path}
    triton = {k.path for k in cs.kernels if k.language == "triton"}
    head_snap = cs.import_graph.snap if cs.import_graph is not None else None
    records: dict[str, Launched | None] = {}

    def record(sid: str) -> Launched | None:
        if sid not in records:
            records[sid] = _record_for(by_id[sid], store, head_snap, base_tree, changed, triton)
        return records[sid]

    refined: dict[str, list[str]] = {}
    predictions: list[Prediction] = []
    for path, ids in cov.items():
        if path not in triton:
            refined[path] = ids
            continue
        keep, dropped = [], {}
        for sid in ids:
            seen = record(sid) if not by_id[sid].covers else None
            if seen is None or path in seen.files:
                keep.append(sid)
            else:
                dropped[sid] = seen
        refined[path] = keep
        if dropped:
            predictions.append(Prediction(path, dropped))
    return refined, predictions


def _record_for(spec: SpecInfo, store: LaunchStore, head_snap: git.Snapshot | None, base_tree: dict[str, str],
                changed: set[str], triton: set[str]) -> Launched | None:
    if head_snap is not None:
        hit = store.get(spec_key(spec, head_snap))
        if hit is not None:
            return hit
    closure = [spec.file, *spec.imports]
    touched = changed.intersection(closure)
    if any(p not in triton for p in touched) or any(p not in base_tree for p in closure):
        return None  # the change may have altered what the spec launches: no prediction
    # Keyed by the head closure's paths at their base contents: a record matches only if the
    # spec's closure at the base was this same set of files.
    hit = store.get(launch_key(spec.id, {p: base_tree[p] for p in closure}))
    if hit is None or any(p in hit.files for p in touched):
        return None
    return hit


# --- narrowing: specs that cannot see the change ----------------------------------------------

JIT_DECORATORS = frozenset({"triton.jit", "triton.runtime.jit", "triton.runtime.jit.jit",
                            "triton.experimental.gluon.jit", "triton.experimental.gluon._runtime.jit"})


def kernel_bodies_only(before: str | bytes, after: str | bytes) -> bool:
    """Whether ``after`` differs from ``before`` only inside the bodies of the module's top-level
    ``@triton.jit`` functions: the same imports, host code, globals, decorators (autotune configs,
    heuristics) and signatures, layout and comments aside. A kernel's body runs only where the kernel
    is launched, or compiled into a kernel that is (a ``@triton.jit`` helper): such a change cannot
    alter what any host code does, nor which kernels a spec launches."""
    try:
        return _skeleton(ast.parse(before)) == _skeleton(ast.parse(after))
    except (SyntaxError, ValueError):
        return False


def _skeleton(tree: ast.Module) -> str:
    aliases = pyscan.import_aliases(tree)
    for node in tree.body:
        if isinstance(node, ast.FunctionDef) and any(pyscan.qualified_name(d, aliases) in JIT_DECORATORS
                                                     for d in node.decorator_list):
            node.body = [ast.Pass()]
    return ast.dump(tree)


@dataclasses.dataclass(frozen=True)
class Narrowed:
    """A spec the import closure selects that is not run: each changed file it imports was changed
    only in its kernels' bodies, and the spec was seen, by a run of the base's own commit on the code it
    imports now but for those files, to launch none of their kernels."""

    spec: str
    files: tuple[str, ...]
    launched: Launched

    def note(self) -> str:
        return (f"spec {self.spec} not run: it imports {', '.join(self.files)}, changed only inside "
                f"@triton.jit bodies, and a run of the base's commit saw it launch none of their kernels (it "
                f"launched {self.launched.describe()}); a kernel's body runs only where it is launched")


def narrow(cs: ChangeSet, specs: Sequence[SpecInfo], why: dict[str, list[str]], store: LaunchStore,
           base_tree: dict[str, str], body_only: set[str]) -> tuple[dict[str, list[str]], list[Narrowed]]:
    """``why`` without the specs that cannot see this change (see :class:`Narrowed`). ``body_only``:
    the changed Triton files whose change is confined to kernel bodies (:func:`kernel_bodies_only`).

    Only a record a run of the base's own commit made (``LaunchStore.get(trusted=True)``), keyed by
    the spec's closure at the base's content, can spare a spec: what a pull request's worker says it
    launched is the code under review's word. Any other reason to run (the spec file, another changed
    file in its closure, a ``covers=``, a file it read, an import the change deletes) keeps the spec."""
    by_id = {s.id: s for s in specs}
    changed = {f.path for f in cs.files} | {f.old_path for f in cs.files if f.old_path}
    kept: dict[str, list[str]] = {}
    narrowed: list[Narrowed] = []
    for sid, reasons in why.items():
        spec = by_id.get(sid)
        files = {f for f in body_only if f"imports {f}, changed" in reasons}
        record = None
        if spec is not None and files and not spec.covers \
                and all(r in {f"imports {f}, changed" for f in files} for r in reasons):
            closure = [spec.file, *spec.imports]
            if changed.intersection(closure) <= body_only and all(p in base_tree for p in closure):
                record = store.get(launch_key(sid, {p: base_tree[p] for p in closure}), trusted=True)
        if record is not None and not files & record.files:
            narrowed.append(Narrowed(sid, tuple(sorted(files)), record))
        else:
            kept[sid] = reasons
    return kept, narrowed


def decided_uncovered(kernel: str, narrowed: Sequence[Narrowed], spec_globs: Sequence[str]) -> Finding:
    """A changed kernel whose every importing spec was narrowed away: nothing checks it, decided
    before the run (the specs do not run, so no launch of theirs can revise it)."""
    seen = "; ".join(f"{n.spec} launched {n.launched.describe()}" for n in narrowed)
    where = spec_globs[0] if spec_globs else "the policy's spec globs"
    return Finding(check="coverage", kind="uncovered", severity=Severity.ERROR, file=kernel,
                   details={"specs_seen": [n.spec for n in narrowed],
                            "launched": {n.spec: list(n.launched.kernels) for n in narrowed}},
                   message=f"{kernel} changed inside its kernels' bodies, and the specs that import it were seen, "
                           f"by a run of the base's commit, to launch none of its kernels ({seen}): nothing checks it "
                           f"(add a spec under {where} that calls it, or name it in the covers= of a spec that does)")


def prediction_finding(p: Prediction) -> Finding:
    seen = "; ".join(f"{sid} launched {got.describe()}" for sid, got in sorted(p.specs.items()))
    return Finding(check="coverage", kind="uncovered-predicted", severity=Severity.WARNING, file=p.kernel,
                   details={"specs": sorted(p.specs)},
                   message=f"{p.kernel}: the specs that import it were seen, on this code, to launch none of its "
                           f"kernels ({seen}); they run again now, and what they launch decides")


# --- after the run: decide -------------------------------------------------------------------

def revise(kernels: Sequence[Any], plan_findings: list[Finding], results: Sequence[JobResult],
           spec_globs: Sequence[str]) -> list[Finding]:
    """Coverage of changed Triton kernels by what this run's specs launched. Returns the plan
    findings revised: an ``uncovered`` finding where every spec that imports a kernel ran and
    launched none of its code; predictions replaced by what was seen. Each kernel's ``specs``
    becomes the specs that launched it (plus those that declare it, or were not observed)."""
    seen = launched_by_spec(results)
    out = [f for f in plan_findings if f.kind != "uncovered-predicted"]
    for k in kernels:
        if k.language != "triton" or k.status == "deleted":
            continue
        predicted = [f for f in plan_findings if f.kind == "uncovered-predicted" and f.file == k.path]
        guessed = set(k.specs) - set(k.declared)
        if predicted:
            guessed |= set(predicted[0].details.get("specs", ()))
        launchers = {s for s, got in seen.items() if k.path in got.files}
        unobserved = {s for s in guessed if s not in seen}
        if launchers:
            out = [f for f in out if not (f.kind == "uncovered" and f.file == k.path)]
        k.specs = tuple(sorted(set(k.declared) | launchers | unobserved))
        if k.specs or not guessed:
            out += [f for f in predicted if unobserved & set(f.details.get("specs", ()))]
            continue
        ran = "; ".join(f"{s} launched {seen[s].describe()}" for s in sorted(guessed))
        where = spec_globs[0] if spec_globs else "the policy's spec globs"
        out.append(Finding(
            check="coverage", kind="uncovered", severity=Severity.ERROR, file=k.path,
            details={"specs_run": sorted(guessed), "launched": {s: list(seen[s].kernels) for s in sorted(guessed)}},
            message=f"{k.path} changed, and the specs that import it ran without launching any of its kernels "
                    f"({ran}): nothing checked it (add a spec under {where} that calls it, or name it in the "
                    f"covers= of a spec that does)"))
    return out
