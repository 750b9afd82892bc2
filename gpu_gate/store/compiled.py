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

Each entry carries a digest of its files, computed by the gate when it harvests the entry (kept in the
shelf's ``.digests.json``), and checked again before a job's workers are shown the shelf
(:func:`verify`): an entry the gate did not harvest (written by hand under a future kernel's key, or
changed after it was kept) is dropped, and the job says so. The digest is not a signature: whoever can
write the store with the gate's own user can write the digests too; it stops what reaches the store by
any other way than the gate's harvest (a restored cache, a copied directory, a tool that writes there).

Layout: ``<store>/<shelf>/<triton key>/<files>``, one shelf per spec (a spec's kernels are what
its jobs need), capped at MAX_SHELF_BYTES (every worker gets a copy of its shelf); the oldest
entries go first.
"""
from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import re
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

from ..protocol.jobs import Job

DIGESTS = ".digests.json"  # in a shelf: each entry's digest, as the gate computed it when harvesting
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
            _record(shelf_dir, entry.name, entry_digest(tmp / "e", entry.name))  # of the copy: what is kept
            os.rename(tmp / "e", shelf_dir / entry.name)
            added += 1
        except OSError:
            pass  # another job kept the same entry first
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
    if added:
        prune(shelf_dir)
    return added


def entry_digest(entry: Path, name: str | None = None) -> str:
    """SHA-256 over the entry's name (``name``, where it is not yet in place) and each file's name,
    size and bytes, in name order."""
    h = hashlib.sha256((name or entry.name).encode() + b"\0")
    for f in sorted(entry.iterdir(), key=lambda p: p.name):
        data = f.read_bytes()
        h.update(f.name.encode() + b"\0" + str(len(data)).encode() + b"\0" + data)
    return h.hexdigest()


@contextlib.contextmanager
def _locked(shelf_dir: Path) -> Iterator[None]:
    """The shelf's digests are read and written by one job at a time (jobs of one spec run at once)."""
    with open(shelf_dir / ".lock", "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def _digests(shelf_dir: Path) -> dict[str, str]:
    try:
        data = json.loads((shelf_dir / DIGESTS).read_text())
    except (OSError, ValueError):
        return {}
    return {str(k): str(v) for k, v in data.items()} if isinstance(data, dict) else {}


def _write_digests(shelf_dir: Path, digests: dict[str, str]) -> None:
    tmp = shelf_dir / f".digests-{os.getpid()}.tmp"
    tmp.write_text(json.dumps(digests, sort_keys=True))
    os.replace(tmp, shelf_dir / DIGESTS)


def _record(shelf_dir: Path, name: str, digest: str) -> None:
    with _locked(shelf_dir):
        _write_digests(shelf_dir, {**_digests(shelf_dir), name: digest})


def verify(shelf_dir: Path | None) -> list[str]:
    """Drop every entry whose digest is not the one the gate recorded when it harvested it (or that it
    never harvested); the names dropped, for the job's note. Run by the gate before a job's workers
    are shown the shelf."""
    if shelf_dir is None or not shelf_dir.is_dir():
        return []
    dropped: list[str] = []
    with _locked(shelf_dir):
        digests = _digests(shelf_dir)
        for entry in sorted(e for e in shelf_dir.iterdir() if not e.name.startswith(".")):
            try:
                ok = entry.is_dir() and not entry.is_symlink() and digests.get(entry.name) == entry_digest(entry)
            except OSError:
                ok = False
            if not ok:
                if entry.is_dir() and not entry.is_symlink():
                    shutil.rmtree(entry, ignore_errors=True)
                else:
                    entry.unlink(missing_ok=True)
                dropped.append(entry.name)
        kept = {name: d for name, d in digests.items() if (shelf_dir / name).is_dir()}
        if kept != digests:
            _write_digests(shelf_dir, kept)
    return dropped


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
