"""What a spec's code read: data files are part of the change.

The candidate's worker records every repository file the code under review opens or loads
(:mod:`gpu_gate.worker.reads`): a JSON tuning table, a ``.so`` through ``ctypes``, a ``.cubin``.
The gate keeps that record with the spec's launches (:class:`gpu_gate.coverage.LaunchStore`,
keyed by the content of the spec and its import closure). At plan time, a changed file that
a spec was seen to read selects that spec (and covers it, where the file is a kernel under the
globs, as a binary artefact is): without the record a PR that changes only the table reads as
"no kernel changes".

The record comes from earlier runs (at the head's content of the spec's closure, or at the
base's): a spec that never ran has none, and the first change to a file it reads is found only
if something else selects it. ``check --all`` on the default branch (nightly) keeps the records.
"""
from __future__ import annotations

from collections.abc import Sequence

from . import coverage, git
from .changes import ChangeSet
from .discovery import SpecInfo

MAX_PATH = 4096


def clean(raw: object) -> frozenset[str]:
    """The read paths of a worker's answer (or a stored record), as relative paths; anything else dropped."""
    if not isinstance(raw, list):
        return frozenset()
    out = set()
    for p in raw:
        if isinstance(p, str) and 0 < len(p) < MAX_PATH and not p.startswith("/") and ".." not in p.split("/"):
            out.add(p)
    return frozenset(out)


def recorded(specs: Sequence[SpecInfo], store: coverage.LaunchStore, head: git.Snapshot,
             base_tree: dict[str, str]) -> dict[str, frozenset[str]]:
    """Spec id -> the files it was seen to read, on the head's content of its closure or on the base's."""
    out: dict[str, frozenset[str]] = {}
    for s in specs:
        seen: frozenset[str] = frozenset()
        hit = store.get(coverage.spec_key(s, head))
        if hit is not None:
            seen |= hit.reads
        closure = [s.file, *s.imports]
        if all(p in base_tree for p in closure):
            at_base = store.get(coverage.launch_key(s.id, {p: base_tree[p] for p in closure}))
            if at_base is not None:
                seen |= at_base.reads
        if seen:
            out[s.id] = seen
    return out


def changed_paths(cs: ChangeSet) -> dict[str, str]:
    """Path -> git's status, for every path the change touched (a rename's old path too)."""
    out = {f.path: f.status for f in cs.files}
    out.update({f.old_path: f.status for f in cs.files if f.old_path})
    return out


def select(cs: ChangeSet, specs: Sequence[SpecInfo], reads: dict[str, frozenset[str]]) -> dict[str, list[str]]:
    """Spec id -> why it runs: a changed file it read (its own file and imports are said elsewhere)."""
    changed = changed_paths(cs)
    why: dict[str, list[str]] = {}
    for s in specs:
        hits = sorted(p for p in reads.get(s.id, ()) if p in changed and p != s.file and p not in s.imports)
        if hits:
            why[s.id] = [f"read {p} when it last ran, {changed[p].replace('_', ' ')}" for p in hits]
    return why


def cover(cov: dict[str, list[str]], reads: dict[str, frozenset[str]]) -> dict[str, list[str]]:
    """Coverage of changed compiled artefacts, plus the specs seen to load them. Only artefacts: a
    Python kernel file is read by its import too, and what a spec launched decides its coverage."""
    from .artefacts import is_artefact

    out = {path: list(ids) for path, ids in cov.items()}
    for sid, files in reads.items():
        for path in files:
            if path in out and sid not in out[path] and is_artefact(path):
                out[path] = sorted([*out[path], sid])
    return out
