"""The result cache: reuse a job's result when nothing it depends on has changed.

What a job's result depends on, and the key it is filed under, are worked out in :mod:`.dependencies`. Each
entry also carries what was run: the seed, the job (canonical JSON) and the digest of every file it
depended on, with a digest over both. A hit is used only when that record is intact and names the
same job (but for its seed) and the same file digests as the job at hand. The key alone already
implies this; the record makes an entry say, and be checked against, exactly what produced it
(``gpu-gate`` shows its commit and seed).

Who may write entries is the real protection (see "What the cache trusts" in
docs/specs.md): only the gate writes them, after its jobs' sandboxes are gone, in a
directory no job can write (the sandbox shows it empty and read-only). Anyone who can write
the directory can forge an entry, since every part of the key can be computed from the tree.
So :class:`JobCache` refuses a cache directory that the repository itself carries (committed
entries are the pull request's), and nothing is stored from a run whose jobs ran unsandboxed.

Red (FAILED) and green (PASSED) results are cached. ERROR and NOT_RUN are not: a
timeout, crash or missing GPU says nothing about the kernel and must be retried. The one exception is
a NOT_RUN that the code and the policy decided with no machine taking part (``not_run_by_code``: the
compile check finding no constexpr values for any kernel): the key covers all it read, so the same
code says the same again, and running it again costs a worker's start for nothing.

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

import json
import os
import re
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

from .. import git
from ..findings import JobResult, Status
from ..policy import Policy
from ..protocol.jobs import Job
from .dependencies import (FORMAT, Dependencies, cache_key, digest, environment_fingerprint, policy_fingerprint,
                           run_record, same_run)

UNCACHEABLE = frozenset({Status.ERROR, Status.NOT_RUN})


def cacheable(result: JobResult) -> bool:
    """Only results that say something about the kernel (passed or failed) are kept, and a not-run
    that the code alone decided."""
    if result.status is Status.NOT_RUN and result.extra.not_run_by_code:
        return True
    return result.status not in UNCACHEABLE


class ResultCache:
    def __init__(self, dir: Path) -> None:  # noqa: A002 - the public name the callers use
        self.dir = Path(dir)

    def _path(self, key: str) -> Path:
        return self.dir / key[:2] / f"{key}.json"

    def get(self, key: str, run: dict[str, object] | None = None,
            still: Callable[[dict[str, object]], bool] | None = None) -> JobResult | None:
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
    def _matches(entry: dict[str, object], run: dict[str, object]) -> bool:
        stored = entry.get("run")
        return (entry.get("run_digest") == digest(stored) and same_run(stored, run)
                and isinstance(stored, dict) and entry.get("seed") == stored["job"].get("seed"))

    def put(self, key: str, result: JobResult, commit: str, run: dict[str, Any] | None = None) -> str | None:
        """Store ``result``; None when stored or deliberately skipped, else a note saying why it was not.
        ``run``: what produced it (see :func:`run_record`), kept with it and checked on every hit."""
        if not cacheable(result):
            return None
        body = result.to_json()
        body["cached_from"] = None
        # A result that itself came from the cache keeps the commit it was first produced at.
        entry: dict[str, object] = {"format": FORMAT, "key": key, "commit": result.cached_from or commit,
                                     "result": body}
        if run is not None:
            entry.update(run=run, run_digest=digest(run), seed=run["job"].get("seed"))
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


def carried_by_commit(repo: Path, directory: Path, head: str | None = None) -> str | None:
    """``directory``, relative to the repository, when the checked-out commit (``head``, by default
    HEAD) has files in it: then what is in it was written by whoever wrote the commit."""
    linked = _linked_inside(repo, directory)
    if linked is not None:
        return linked  # a link the commit carries: entries would be read from and written to where it points
    try:
        rel = directory.resolve().relative_to(repo.resolve()).as_posix()
    except ValueError:
        return None  # outside the repository: the commit cannot carry it
    head = head or git.resolve(repo, "HEAD")
    prefix = rel.rstrip("/") + "/"
    tracked = git.list_tree(repo, head) if head else {}
    return rel if any(p.startswith(prefix) for p in tracked) else None


def _linked_inside(repo: Path, directory: Path) -> str | None:
    """``directory``'s path relative to the repository, where that path passes through a symbolic link."""
    root = Path(os.path.abspath(repo))
    full = Path(os.path.abspath(directory if directory.is_absolute() else root / directory))
    try:
        parts = full.relative_to(root).parts
    except ValueError:
        return None
    current = root
    for part in parts:
        current = current / part
        if current.is_symlink():
            return full.relative_to(root).as_posix()
    return None


class JobCache:
    """The result cache as ``check`` uses it: a job's entry under the key of what it depends on, in a
    directory the checked-out commit does not carry.

    ``repo``: the tree the jobs run, whose files the keys hash (with ``--head``, the export of the head
    commit, see :mod:`gpu_gate.commands.head_tree`; else the work tree); ``home``: the repository, where
    the cache lives by default and whose checked-out commit must not carry it (by default ``repo``);
    ``extra``: more of what every job's result depends on (the setup outputs taken into the export,
    path -> digest)."""

    def __init__(self, policy: Policy, repo: Path, directory: Path | None, gpus: tuple[str, ...] = (), *,
                 home: Path | None = None, extra: dict[str, str] | None = None) -> None:
        self.repo = repo
        self.home = home or repo
        self.policy = policy
        self.cache = ResultCache(directory or (self.home / policy.cache.dir))
        self.fingerprint = policy_fingerprint(policy, extra)
        self.env = environment_fingerprint(gpus, policy.cuda.sanitizer)
        self.head = git.resolve(repo, "HEAD")
        self._deps = Dependencies(repo, policy)
        self._keys: dict[str, str] = {}
        self._runs: dict[str, dict[str, object]] = {}
        self.notes: list[str] = []
        self.refused = carried_by_commit(self.home, self.cache.dir, self.head)
        if self.refused:
            self.notes.append(f"result cache: not used, since this commit carries its directory {self.refused} "
                              f"(files in it, or a link on its path: entries must come from gpu-gate's own runs, "
                              f"never from the tree)")

    def _key(self, job: Job) -> str:
        if job.id not in self._keys:
            self._keys[job.id] = cache_key(job, self.repo, sorted(self._deps.of(job)), self.fingerprint, self.env)
        return self._keys[job.id]

    def _run(self, job: Job) -> dict[str, object]:
        if job.id not in self._runs:
            self._runs[job.id] = run_record(job, self.repo, sorted(self._deps.of(job)))
        return self._runs[job.id]

    def lookup(self, job: Job) -> JobResult | None:
        if self.refused:
            return None
        from . import reads

        return self.cache.get(self._key(job), self._run(job), still=lambda run: reads.unchanged(run.get("reads"),
                                                                                               self.repo))

    def store(self, result: JobResult, job: Job) -> None:
        if self.refused:
            return
        from . import reads

        # the files the job's code read, as they are now: a later change to one is a miss (see .reads)
        run = {**self._run(job), "reads": reads.digests(self.repo, result)}
        note = self.cache.put(self._key(job), result, self.head, run)
        if note:
            self.notes.append(note)
