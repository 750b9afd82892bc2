"""Compiled Triton kernels kept between runs: what the base's code compiled, for the next run's
workers to start from. Only the gate (the judge's side) reads and writes it.

Compiling dominates a gate on a real Triton kernel: every size class and dtype the cases reach is a
new specialization, compiled by the head's code and again by the base's. Triton's own cache is
keyed by content (the kernel's source and its callees', their line numbers, the constexprs, the
options, the target and Triton's version), so an entry is valid for any code with the same key,
and a changed kernel never meets a stale binary.

Trust. The store lives in the result cache's directory, which no sandbox shows. It takes entries
only from the *base's* worker (the trusted branch's code, in a sandbox of its own, after every
process of the job is gone), never from the code under review; so a pull request cannot plant a
binary that a later run, or the base's side of its own run, would load. The head's and the base's
workers are shown their spec's shelf read-only in their sandbox (a mount in the worker's own
directory), and each copies it into its own
private cache directory as it starts (:mod:`gpu_gate.worker.kept_kernels`, :func:`seed`): what the
head's code writes there goes nowhere. The base's tree is shown at the repository's own path in
its sandbox (see ``executor``), so the kernels it compiles carry the paths the head's would.

Triton's group files name their members by absolute path; a copy's are pointed at the copy.

Layout: ``<store>/<shelf>/<triton key>/<files>``, one shelf per spec (a spec's kernels are what
its jobs need), capped at MAX_SHELF_BYTES (every worker gets a copy of its shelf); the oldest
entries go first.
"""
from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import tempfile
from pathlib import Path

from ..protocol.jobs import Job

MAX_SHELF_BYTES = 256 << 20  # every worker of a job gets a copy: kept small
MAX_ENTRY_BYTES = 256 << 20
_ENTRY = re.compile(r"^[A-Za-z0-9_-]{16,128}$")


def shelf(store: Path, job: Job) -> Path | None:
    """The shelf of the job's spec (None for a job without one)."""
    if job.spec is None:
        return None
    return store / hashlib.sha256(job.spec.id.encode()).hexdigest()[:24]


def seed(shelf_dir: Path | None, dest: Path) -> int:
    """Copy the shelf's entries into a worker's Triton cache directory (in the worker, while it
    starts); how many were copied. An entry the worker's Triton wrote first is left as it is."""
    if shelf_dir is None or not shelf_dir.is_dir():
        return 0
    dest.mkdir(parents=True, exist_ok=True)
    n = 0
    for entry in _entries(shelf_dir):
        target = dest / entry.name
        if not target.exists():
            try:
                shutil.copytree(entry, target, symlinks=True)
            except OSError:
                continue  # Triton made it meanwhile (an import that compiles), or no room left
            _relocate_groups(target)
            n += 1
    return n


def _relocate_groups(entry: Path) -> None:
    """Triton's group files (``__grp__<name>.json``) list their members by absolute path, the
    directory they were compiled in; an entry whose members are not found there is compiled again.
    Point them at the copy's own files."""
    for grp in entry.glob("__grp__*.json"):
        try:
            data = json.loads(grp.read_text())
            children = data.get("child_paths")
            if not isinstance(children, dict):
                continue
            data["child_paths"] = {str(k): str(entry / Path(str(v)).name) for k, v in children.items()
                                   if (entry / Path(str(v)).name).is_file()}
            grp.write_text(json.dumps(data))
        except (OSError, ValueError):
            continue


def harvest(src: Path, shelf_dir: Path | None) -> int:
    """Keep what the base's worker compiled (its Triton cache directory, after the job): each new,
    well-formed entry is copied in whole and renamed into place. How many were added."""
    if shelf_dir is None or not src.is_dir():
        return 0
    shelf_dir.mkdir(parents=True, exist_ok=True)
    added = 0
    for entry in _entries(src):
        if (shelf_dir / entry.name).exists():
            continue
        tmp = Path(tempfile.mkdtemp(prefix=".in-", dir=shelf_dir))
        try:
            shutil.copytree(entry, tmp / "e")
            os.rename(tmp / "e", shelf_dir / entry.name)
            added += 1
        except OSError:
            pass  # another job kept the same entry first
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
    if added:
        prune(shelf_dir)
    return added


def prune(shelf_dir: Path, max_bytes: int = MAX_SHELF_BYTES) -> int:
    """Drop the oldest entries until the shelf holds at most ``max_bytes``; how many went."""
    sized = sorted(((e.stat().st_mtime, _size(e), e) for e in _entries(shelf_dir)), key=lambda t: t[0])
    total = sum(size for _, size, _ in sized)
    gone = 0
    for _, size, entry in sized:
        if total <= max_bytes:
            break
        shutil.rmtree(entry, ignore_errors=True)
        total -= size
        gone += 1
    return gone


def _entries(root: Path) -> list[Path]:
    """Entries that look like Triton's: a directory named by its key, holding regular files only,
    not too large. Anything else is left alone."""
    out = []
    for e in sorted(root.iterdir()):
        if not _ENTRY.match(e.name) or e.is_symlink() or not e.is_dir():
            continue
        files = list(e.iterdir())
        if not files or any(f.is_symlink() or not f.is_file() for f in files):
            continue
        if sum(f.stat().st_size for f in files) > MAX_ENTRY_BYTES:
            continue
        out.append(e)
    return out


def _size(entry: Path) -> int:
    return sum(f.stat().st_size for f in entry.iterdir())
