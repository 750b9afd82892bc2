"""The result cache and the files a job's code read: their bytes decide a hit too.

The key covers the spec, its import closure and its kernels (see :mod:`.results`), all known
before the job runs. The files the candidate opened or loaded (a tuning table, a ``.so``; see
:mod:`gpu_gate.worker.reads`) are known only after: the gate stores their digests with the
entry, and a hit whose read files changed since is a miss. So a change to a table alone never
serves the result computed with the old one.
"""
from __future__ import annotations

from pathlib import Path

from ..findings import JobResult
from ..read_files import clean
from .dependencies import file_digest


def read_paths(result: JobResult) -> frozenset[str]:
    launches = result.extra.launches
    return clean(launches.get("reads")) if isinstance(launches, dict) else frozenset()


def digests(repo_root: Path, result: JobResult) -> dict[str, str]:
    """Path -> digest of every file the job's code read, as the gate reads them now (after the job)."""
    return {rel: file_digest(repo_root, rel) for rel in sorted(read_paths(result))}


def unchanged(stored: object, repo_root: Path) -> bool:
    """Whether every read file recorded with an entry still has the bytes it had (no record: nothing read)."""
    if stored is None:
        return True
    if not isinstance(stored, dict):
        return False
    return all(isinstance(rel, str) and file_digest(repo_root, rel) == digest for rel, digest in stored.items())
