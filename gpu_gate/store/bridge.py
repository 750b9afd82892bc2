"""Connects ``check`` to the result cache: what a job's result depends on, and where it lives.

The key covers the job's kernel files, the spec and every repository file it imports
or names (transitively), each CUDA file's includes, the policy, gpu-gate's version
and the machine's toolchain (GPU model, driver, torch/triton/cupy, nvcc). The files are read from
the tree the jobs run: with ``--head``, the export of the head commit (see
:mod:`gpu_gate.commands.head_tree`), with the digests of the setup outputs taken into it.

A cache directory that the checked-out commit itself carries is not used: its entries were
written by whoever wrote the commit, and anyone can compute a valid entry for any tree.
"""
from __future__ import annotations

import concurrent.futures
import hashlib
import importlib.metadata
import json
import os
import platform
import shutil
from pathlib import Path

from .. import cudascan, discovery, git, proc
from .results import ResultCache, cache_key, run_record
from ..findings import JobResult
from ..protocol.jobs import Job
from ..policy import Policy

_PACKAGES = ("torch", "triton", "cupy-cuda13x", "cupy-cuda12x", "nvidia-ml-py")


def _gpu_names() -> str:
    from ..executor.slots import gpu_inventory

    rows = gpu_inventory()
    return "\n".join(f"{g['name']}, {g['driver']}" for g in rows) if rows else "unknown"


def _nvcc_version() -> str:
    r = proc.run(["nvcc", "--version"], timeout=20)
    return r.stdout.strip().splitlines()[-1] if r.ok and r.stdout.strip() else "unknown"


def _sanitizer_version(sanitizer: str | None) -> str | None:
    from ..commands.doctor import find_compute_sanitizer

    path = sanitizer or find_compute_sanitizer()
    if not path:
        return None
    r = proc.run([path, "--version"], timeout=20)
    version = [ln.strip() for ln in r.stdout.splitlines() if ln.strip().startswith("Version")]
    return version[-1] if r.ok and version else "unknown"


def environment_fingerprint(gpus: tuple[str, ...], sanitizer: str | None = None) -> dict[str, str]:
    """The machine's side of the key. ``sanitizer``: the policy's compute-sanitizer path, if it names one."""
    env: dict[str, str] = {"device": "cuda" if gpus else "cpu", "python": platform.python_version()}
    for pkg in _PACKAGES:
        try:
            env[pkg] = importlib.metadata.version(pkg)
        except importlib.metadata.PackageNotFoundError:
            pass
    # The tools' versions, asked at once (each is a process of its own; a cached run waits for them).
    with concurrent.futures.ThreadPoolExecutor(max_workers=3) as pool:
        gpus_f = pool.submit(_gpu_names) if gpus else None
        nvcc_f = pool.submit(_nvcc_version) if shutil.which("nvcc") else None
        san_f = pool.submit(_sanitizer_version, sanitizer) if gpus else None
        if gpus_f is not None:
            env["gpus"] = gpus_f.result()
        if nvcc_f is not None:
            env["nvcc"] = nvcc_f.result()
        if san_f is not None and (version := san_f.result()) is not None:
            env["compute-sanitizer"] = version  # the sanitizer jobs' findings depend on the tool's version
    return env


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
    """``repo``: the tree the jobs run, whose files the keys hash (an export of the head commit, or the
    work tree); ``home``: the repository, where the cache lives by default and whose checked-out commit
    must not carry it (by default ``repo``); ``extra``: more of what every job's result depends on
    (the setup outputs taken into the export, path -> digest)."""

    def __init__(self, policy: Policy, repo: Path, directory: Path | None, gpus: tuple[str, ...] = (), *,
                 home: Path | None = None, extra: dict[str, str] | None = None) -> None:
        self.repo = repo
        self.home = home or repo
        self.policy = policy
        self.cache = ResultCache(directory or (self.home / policy.cache.dir))
        keyed: object = policy.model_dump(mode="json")
        if extra:
            keyed = {"policy": keyed, "setup_outputs": extra}
        self.fingerprint = hashlib.sha256(json.dumps(keyed, sort_keys=True).encode()).hexdigest()
        self.env = environment_fingerprint(gpus, policy.cuda.sanitizer)
        self._files: frozenset[str] | None = None
        self.head = git.resolve(repo, "HEAD")
        self._specs = {s.id: s for s in discovery.discover_specs(repo, None, policy)}
        self._keys: dict[str, str] = {}
        self._runs: dict[str, dict[str, object]] = {}
        self.notes: list[str] = []
        self.refused = self._committed_entries()
        if self.refused:
            self.notes.append(f"result cache: not used, since this commit carries its directory {self.refused} "
                              f"(files in it, or a link on its path: entries must come from gpu-gate's own runs, "
                              f"never from the tree)")

    def _committed_entries(self) -> str | None:
        return carried_by_commit(self.home, self.cache.dir, self.head)

    def _deps(self, job: Job) -> set[str]:
        deps: set[str] = set()
        if job.spec is not None and job.spec.id in self._specs:
            info = self._specs[job.spec.id]
            deps |= set(info.imports) | set(info.references)
        todo = [k for k in (*job.kernels, *deps) if cudascan.is_c_source(k)]
        if self._files is None:
            self._files = frozenset(git.list_files(self.repo, None))
        files = self._files
        while todo:
            path = todo.pop()
            try:
                text = (self.repo / path).read_bytes()
            except OSError:
                continue
            for name in cudascan.includes(text):
                hit = cudascan.resolve_include(name, path, self.policy.cuda.include_dirs, files)
                if hit and hit not in deps:
                    deps.add(hit)
                    todo.append(hit)
        return deps

    def _key(self, job: Job) -> str:
        if job.id not in self._keys:
            self._keys[job.id] = cache_key(job, self.repo, sorted(self._deps(job)), self.fingerprint, self.env)
        return self._keys[job.id]

    def _run(self, job: Job) -> dict[str, object]:
        if job.id not in self._runs:
            self._runs[job.id] = run_record(job, self.repo, sorted(self._deps(job)))
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
