"""The result cache: reuse a job's result when nothing it depends on has changed.

The key is a SHA-256 over everything that can change a job's outcome:

- the job's check, spec, case and resolved options (canonical JSON);
- the bytes of the kernel sources (``job.kernels``) and of the spec file and its
  transitive dependencies (repo-relative paths given by the caller); a missing
  file counts too, so deleting one changes the key;
- the policy fingerprint (a string from the caller);
- the gpu-gate version;
- an environment fingerprint (GPU model, driver, CUDA, torch, triton, cupy and
  compute-sanitizer versions; a mapping from the caller, so a CPU run passes what it has).

The job's seed is not in the key: an unchanged kernel is not fuzzed again with a new
seed; the cached result keeps the seed it was produced with.

Red (FAILED) and green (PASSED) results are cached. ERROR and NOT_RUN are not: a
timeout, crash or missing GPU says nothing about the kernel and must be retried.

Layout: ``DIR/<key[:2]>/<key>.json``, each file holding ``{"format", "key", "commit",
"result"}``. Writes go to a temporary file in the same folder and are moved into
place with ``os.replace``, so readers and concurrent writers only ever see whole
entries. An unreadable or corrupt entry is a miss. A failed write (full disk,
read-only folder) is returned as a note and never fails the run.

With ``actions/cache``, save the folder between workflow runs::

    - uses: actions/cache/restore@<full sha>   # on every run, PRs included
      with:
        path: .gpu-gate/cache
        key: gpu-gate-${{ runner.os }}-${{ hashFiles('csrc/**', 'gate/**', '.gpu-gate.yml') }}
        restore-keys: gpu-gate-${{ runner.os }}-

Any restored snapshot is safe to use because entries are content-addressed: a stale
entry simply never matches. Save the folder (``actions/cache/save``) only from
trusted runs (pushes to the default branch): code under test runs on the same
machine as the cache folder, so an untrusted PR could plant entries.
"""
from __future__ import annotations

import hashlib
import json
import os
import tempfile
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from .findings import JobResult, Status
from .jobs import Job

FORMAT = 1
UNCACHEABLE = frozenset({Status.ERROR, Status.NOT_RUN})


def gpu_gate_version() -> str:
    # The package's own version: the distribution's name differs from the command's, and the
    # action runs gpu-gate from a copy of its checkout that has no distribution metadata.
    from . import __version__

    return __version__


def _canonical(value: Any) -> bytes:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), default=str).encode()


def _file_digest(repo_root: Path, rel: str) -> str:
    try:
        return hashlib.sha256((repo_root / rel).read_bytes()).hexdigest()
    except FileNotFoundError:
        return "missing"
    except OSError as exc:
        # An unreadable file must not match a cached result made from its old bytes.
        return f"unreadable:{type(exc).__name__}"


def cache_key(
    job: Job,
    repo_root: Path,
    dep_files: Iterable[str],
    policy_fingerprint: str,
    env: Mapping[str, str],
) -> str:
    """SHA-256 hex digest of everything the job's result depends on (see the module docstring)."""
    files = set(job.kernels) | set(dep_files)
    if job.spec is not None:
        files.add(job.spec.file)
    parts = {
        "format": FORMAT,
        "job": {
            "check": job.check,
            "spec": job.spec.id if job.spec else None,
            "case": job.case,
            "options": job.options,
        },
        "files": {rel: _file_digest(repo_root, rel) for rel in sorted(files)},
        "policy": policy_fingerprint,
        "gpu_gate": gpu_gate_version(),
        "env": dict(env),
    }
    return hashlib.sha256(_canonical(parts)).hexdigest()


def cacheable(result: JobResult) -> bool:
    """Only results that say something about the kernel (passed or failed) are kept."""
    return result.status not in UNCACHEABLE


class ResultCache:
    def __init__(self, dir: Path) -> None:  # noqa: A002 - the public name the callers use
        self.dir = Path(dir)

    def _path(self, key: str) -> Path:
        return self.dir / key[:2] / f"{key}.json"

    def get(self, key: str) -> JobResult | None:
        """The stored result with ``cached_from`` set to its commit, or None (a miss)."""
        try:
            entry = json.loads(self._path(key).read_text(encoding="utf-8"))
            if entry.get("format") != FORMAT or entry.get("key") != key:
                return None
            result = JobResult.from_json(entry["result"])
            result.cached_from = str(entry["commit"])
        except (OSError, ValueError, KeyError, TypeError, AttributeError):
            return None
        return result if cacheable(result) else None

    def put(self, key: str, result: JobResult, commit: str) -> str | None:
        """Store ``result``; None when stored or deliberately skipped, else a note saying why it was not."""
        if not cacheable(result):
            return None
        body = result.to_json()
        body["cached_from"] = None
        # A result that itself came from the cache keeps the commit it was first produced at.
        entry = {"format": FORMAT, "key": key, "commit": result.cached_from or commit, "result": body}
        try:
            self._write(self._path(key), json.dumps(entry, sort_keys=True).encode("utf-8"))
        except OSError as exc:
            return f"result cache: could not store {key[:12]} in {self.dir}: {exc.strerror or exc}"
        return None

    @staticmethod
    def _write(path: Path, data: bytes) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
        try:
            with os.fdopen(fd, "wb") as f:
                f.write(data)
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, path)
        except BaseException:
            try:
                os.unlink(tmp)
            except OSError:
                pass
            raise
