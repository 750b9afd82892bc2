"""What a job's result depends on, and the key the result cache files it under.

The key is a SHA-256 over everything that can change a job's outcome:

- the job's check, spec, case and resolved options (canonical JSON);
- the bytes of the kernel sources (``job.kernels``), of the spec file and of every repository file
  it imports or names, transitively, with each CUDA file's includes (:class:`Dependencies`); a
  missing file counts too, so deleting one changes the key;
- the policy (:func:`policy_fingerprint`), with the setup outputs taken into the head's export;
- the gpu-gate version;
- the machine's toolchain (:func:`environment_fingerprint`: GPU model, driver, CUDA, torch, triton,
  cupy and compute-sanitizer versions; a CPU run gives what it has).

The job's seed is not in the key: an unchanged kernel is not fuzzed again with a new seed; the
cached result keeps the seed it was produced with. What was run (the job, its seed and the digest
of every file, :func:`run_record`) is kept with each entry and checked on every hit (:func:`same_run`).
"""
from __future__ import annotations

import concurrent.futures
import hashlib
import importlib.metadata
import json
import platform
import shutil
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from .. import cudascan, discovery, git, proc
from ..policy import Policy
from ..protocol.jobs import Job

FORMAT = 2
_PACKAGES = ("torch", "triton", "cupy-cuda13x", "cupy-cuda12x", "nvidia-ml-py")


def gpu_gate_version() -> str:
    # The package's own version: the distribution's name differs from the command's, and the
    # action runs gpu-gate from a copy of its checkout that has no distribution metadata.
    from .. import __version__

    return __version__


def canonical(value: object) -> bytes:
    return json.dumps(value, sort_keys=True, separators=(",", ":"), default=str).encode()


def digest(value: object) -> str:
    return hashlib.sha256(canonical(value)).hexdigest()


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


def run_record(job: Job, repo_root: Path, dep_files: Iterable[str]) -> dict[str, object]:
    """Exactly what a job runs: the job itself and the digest of every file it depends on."""
    return {"job": job.to_json(), "files": {rel: file_digest(repo_root, rel) for rel in _files_of(job, dep_files)}}


def same_run(stored: object, current: dict[str, Any]) -> bool:
    """The stored record describes the job at hand: the same job but for its seed (and its cost
    estimate and the plan's reasons for it, which are not part of what runs), and the same bytes of
    every file."""
    def core(job: dict[str, object]) -> dict[str, object]:
        return {k: v for k, v in job.items() if k not in ("seed", "cost", "why")}

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
    return hashlib.sha256(canonical(parts)).hexdigest()


def policy_fingerprint(policy: Policy, extra: dict[str, str] | None = None) -> str:
    """The policy's digest; with ``extra`` (the setup outputs taken into the head's export, path ->
    digest), over both."""
    keyed: object = policy.model_dump(mode="json")
    if extra:
        keyed = {"policy": keyed, "setup_outputs": extra}
    return hashlib.sha256(json.dumps(keyed, sort_keys=True).encode()).hexdigest()


class Dependencies:
    """The repository files a job's result depends on besides its kernels and spec: what the spec
    imports or names, and every header a CUDA file among them includes, transitively."""

    def __init__(self, repo: Path, policy: Policy) -> None:
        self.repo = repo
        self.include_dirs = policy.cuda.include_dirs
        self._specs = {s.id: s for s in discovery.discover_specs(repo, None, policy)}
        self._files: frozenset[str] | None = None

    def of(self, job: Job) -> set[str]:
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
                hit = cudascan.resolve_include(name, path, self.include_dirs, files)
                if hit and hit not in deps:
                    deps.add(hit)
                    todo.append(hit)
        return deps


def _gpu_names() -> str:
    from ..executor.slots import gpu_inventory

    rows = gpu_inventory()
    return "\n".join(f"{g['name']}, {g['driver']}" for g in rows) if rows else "unknown"


def _nvcc_version() -> str:
    r = proc.run(["nvcc", "--version"], timeout=20)
    return r.stdout.strip().splitlines()[-1] if r.ok and r.stdout.strip() else "unknown"


def _sanitizer_version(sanitizer: str | None) -> str | None:
    from ..health.tools import find_compute_sanitizer

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
