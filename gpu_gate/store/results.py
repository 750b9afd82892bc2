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

Each entry also carries what was run: the seed, the job (canonical JSON) and the digest of
every file it depended on, with a digest over both. A hit is used only when that record is
intact and names the same job (but for its seed) and the same file digests as the job at
hand. The key alone already implies this; the record makes an entry say, and be checked
against, exactly what produced it (``gpu-gate`` shows its commit and seed).

Who may write entries is the real protection (see "What the cache trusts" in
docs/specs.md): only the gate writes them, after its jobs' sandboxes are gone, in a
directory no job can write (the sandbox shows it empty and read-only). Anyone who can write
the directory can forge an entry, since every part of the key can be computed from the tree.
So ``cachebridge`` refuses a cache directory that the repository itself carries (committed
entries are the pull request's), and nothing is stored from a run whose jobs ran unsandboxed.

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
import re
import tempfile
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any

from ..findings import JobResult, Status
from ..protocol.jobs import Job

FORMAT = 2
UNCACHEABLE = frozenset({Status.ERROR, Status.NOT_RUN})


def gpu_gate_version() -> str:
    # The package's own version: the distribution's name differs from the command's, and the
    # action runs gpu-gate from a copy of its checkout that has no distribution metadata.
    from .. import __version__

    return __version__


def _canonical(value: Any) -> bytes:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), default=str).encode()


def file_digest(repo_root: Path, rel: str) -> str:
    try:
        return hashlib.sha256((repo_root / rel).read_bytes()).hexdigest()
    except FileNotFoundError:
        return "missing"
    except OSError as exc:
        # An unreadable file must not match a cached result made from its old bytes.
        return f"unreadable:{type(exc).__name__}"


def _files_of(job: Job, dep_files: Iterable[str]) -> list[str]:
    files = set(job.kernels) | set(dep_files)
    if job.spec is not None:
        files.add(job.spec.file)
    return sorted(files)


def run_record(job: Job, repo_root: Path, dep_files: Iterable[str]) -> dict[str, Any]:
    """Exactly what a job runs: the job itself and the digest of every file it depends on."""
    return {"job": job.to_json(), "files": {rel: file_digest(repo_root, rel) for rel in _files_of(job, dep_files)}}


def _digest(value: Any) -> str:
    return hashlib.sha256(_canonical(value)).hexdigest()


def _same_run(stored: Any, current: dict[str, Any]) -> bool:
    """The stored record describes the job at hand: the same job but for its seed (and its cost
    estimate, which is not part of what runs), and the same bytes of every file."""
    def core(job: dict[str, Any]) -> dict[str, Any]:
        return {k: v for k, v in job.items() if k not in ("seed", "cost")}

    return (isinstance(stored, dict) and isinstance(stored.get("job"), dict)
            and stored.get("files") == current["files"] and core(stored["job"]) == core(current["job"]))


def cache_key(
    job: Job,
    repo_root: Path,
    dep_files: Iterable[str],
    policy_fingerprint: str,
    env: Mapping[str, str],
) -> str:
    """SHA-256 hex digest of everything the job's result depends on (see the module docstring)."""
    files = _files_of(job, dep_files)
    parts = {
        "format": FORMAT,
        "job": {
            "check": job.check,
            "spec": job.spec.id if job.spec else None,
            "case": job.case,
            "options": job.options,
        },
        "files": {rel: file_digest(repo_root, rel) for rel in files},
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

    def get(self, key: str, run: dict[str, Any] | None = None,
            still: Callable[[dict[str, Any]], bool] | None = None) -> JobResult | None:
        """The stored result with ``cached_from`` set to its commit, or None (a miss). With ``run``
        (see :func:`run_record`), only an entry whose own record is intact and describes that run;
        with ``still``, only one whose stored record it accepts (the files the job read: see .reads)."""
        try:
            entry = json.loads(self._path(key).read_text(encoding="utf-8"))
            if entry.get("format") != FORMAT or entry.get("key") != key:
                return None
            if run is not None and not self._matches(entry, run):
                return None
            if still is not None and not still(entry.get("run") or {}):
                return None
            result = JobResult.from_json(entry["result"])
            result.cached_from = str(entry["commit"])
        except (OSError, ValueError, KeyError, TypeError, AttributeError):
            return None
        return result if cacheable(result) else None

    @staticmethod
    def _matches(entry: dict[str, Any], run: dict[str, Any]) -> bool:
        stored = entry.get("run")
        return (entry.get("run_digest") == _digest(stored) and _same_run(stored, run)
                and isinstance(stored, dict) and entry.get("seed") == stored["job"].get("seed"))

    def put(self, key: str, result: JobResult, commit: str, run: dict[str, Any] | None = None) -> str | None:
        """Store ``result``; None when stored or deliberately skipped, else a note saying why it was not.
        ``run``: what produced it (see :func:`run_record`), kept with it and checked on every hit."""
        if not cacheable(result):
            return None
        body = result.to_json()
        body["cached_from"] = None
        # A result that itself came from the cache keeps the commit it was first produced at.
        entry: dict[str, Any] = {"format": FORMAT, "key": key, "commit": result.cached_from or commit, "result": body}
        if run is not None:
            entry.update(run=run, run_digest=_digest(run), seed=run["job"].get("seed"))
        try:
            self._write(self._path(key), json.dumps(entry, sort_keys=True).encode("utf-8"))
        except OSError as exc:
            return f"result cache: could not store {key[:12]} in {self.dir}: {exc.strerror or exc}"
        return None

    def clear(self) -> int:
        """Remove every entry (files named as entries are: ``<2 hex>/<64 hex>.json``, nothing
        else, whatever the directory holds); how many were removed."""
        removed = 0
        for path in self.dir.glob("[0-9a-f][0-9a-f]/*.json"):
            if re.fullmatch(r"[0-9a-f]{64}\.json", path.name) and path.name.startswith(path.parent.name):
                try:
                    path.unlink()
                    removed += 1
                except OSError:
                    pass
        return removed

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
