"""Bytecode of the runner's Python packages, kept between runs (the gate's side; jobs never write it).

Where torch was installed without bytecode (an image built with ``pip install --no-compile``), every
job's interpreter compiles what it imports from source: torch, and whatever the repository's code
imports (on an H100 runner, Liger-Kernel's ``liger_kernel.ops`` pulls in transformers and peft: 8 of
its 13 s of import were ``compile()``). A run's jobs share one bytecode directory
(``PYTHONPYCACHEPREFIX``) that the gate fills with torch's bytecode before the first job (see
``executor.shared_bytecode``); this module keeps that directory's contents from one run to the next.

- **The store** lives in the result cache's directory, which no sandbox shows: ``<cache>/bytecode/<tag>``,
  one per interpreter. A run starts from a copy of it (hard links: a job sees the run's directory
  read-only, and Python replaces a ``.pyc`` by renaming a new file over it, never in place).
- **What goes in:** each worker says, at the end of its job, which of the modules it imported had no
  bytecode in the run's directory (``worker.serve``). Those are facts from the code under review, so
  the gate takes only files of the *runner's* installation: regular ``.py`` files under the
  interpreter's own library directories (the standard library and site-packages), never under the
  repository, the base's tree or a job's directory. It compiles them itself (``compileall``, which
  reads source and runs none of it) into the store. At worst a pull request makes the gate compile
  more of the runner's own files.
- **Stale bytecode** cannot load: a ``.pyc`` records its source's modification time and size, and
  Python compiles again where they differ (a package upgraded on the runner).
- Not kept where jobs ran without a sandbox that protects files: an unsandboxed job could write
  through the hard links into the store.
"""
from __future__ import annotations

import hashlib
import os
import shutil
import site
import subprocess
import sys
import sysconfig
import threading
import time
from collections.abc import Iterable
from pathlib import Path
from typing import Protocol


class _Extra(Protocol):
    bytecode_missing: list[str] | None


class _Result(Protocol):
    """A job's result as far as the keeper reads it (``gpu_gate.findings.JobResult``, which the worker's
    side, this module's other user, never imports: tests/test_fence.py)."""

    @property
    def extra(self) -> _Extra: ...

MAX_FILES = 50_000  # the most files one run adds to the store
MAX_FILE_BYTES = 16 << 20
COMPILE_TIMEOUT_S = 300


def store_dir(cache_dir: Path, python: str | None = None) -> Path:
    """The store for this interpreter (the workers' own, where the policy names one) under the
    result cache's directory."""
    exe = os.path.realpath(python or sys.executable)
    tag = hashlib.sha256(f"{exe}\0{sys.version}".encode()).hexdigest()[:16]
    return cache_dir / "bytecode" / tag


def library_roots() -> list[Path]:
    """The interpreter's own library directories: the standard library and site-packages."""
    paths = sysconfig.get_paths()
    roots = {paths.get(k) for k in ("stdlib", "platstdlib", "purelib", "platlib")}
    try:
        roots.update(site.getsitepackages())
    except AttributeError:  # a virtualenv's old site module
        pass
    return sorted({Path(os.path.realpath(r)) for r in roots if r})


def seed(store: Path, run_dir: Path) -> int:
    """Hard-link the store's files into the run's bytecode directory (copies where links fail);
    how many files."""
    if not store.is_dir():
        return 0
    n = 0
    for root, _dirs, files in os.walk(store):
        dest = run_dir / Path(root).relative_to(store)
        dest.mkdir(parents=True, exist_ok=True)
        for name in files:
            if not name.endswith(".pyc"):
                continue
            src, dst = Path(root) / name, dest / name
            try:
                os.link(src, dst)
            except FileExistsError:
                continue
            except OSError:
                try:
                    shutil.copy2(src, dst)
                except OSError:
                    continue
            n += 1
    return n


def admissible(files: Iterable[object], *, roots: list[Path], forbidden: Iterable[Path]) -> list[str]:
    """Of the files a worker named, those the gate may compile: real ``.py`` files under ``roots``
    and under none of ``forbidden`` (the repository, the base's tree, the jobs' directories)."""
    banned = [Path(os.path.realpath(p)) for p in forbidden]
    out: set[str] = set()
    for f in files:
        if not isinstance(f, str) or not f.endswith(".py") or "\n" in f or len(out) >= MAX_FILES:
            continue
        real = Path(os.path.realpath(f))
        if not any(r == real or r in real.parents for r in roots):
            continue
        if any(b == real or b in real.parents for b in banned):
            continue
        try:
            st = real.stat()
        except OSError:
            continue
        if not real.is_file() or st.st_size > MAX_FILE_BYTES:
            continue
        out.add(str(real))
    return sorted(out)


class Keeper:
    """The gate's side during a run: as each job ends, takes what its worker named (and drops it
    from the job's result), and compiles the admissible files into the store on a thread of its own,
    beside the jobs still running. ``store`` None: the lists are dropped, nothing is kept."""

    def __init__(self, store: Path | None, forbidden: Iterable[Path | None]) -> None:
        self.store = store
        self.forbidden = [p for p in forbidden if p is not None] + ([store] if store is not None else [])
        self.named: set[str] = set()  # every name a worker gave, judged once
        self.kept = 0
        self.busy_s = 0.0
        self._todo: list[list[str]] = []
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None
        self._roots: list[Path] | None = None

    def take(self, result: _Result) -> None:
        """``result``: a job's (``gpu_gate.findings.JobResult``, which a worker's side never imports)."""
        listed, result.extra.bytecode_missing = result.extra.bytecode_missing, None  # never kept in the result
        if self.store is None or not listed:
            return
        with self._lock:  # jobs end on the executor's threads
            if self._roots is None:
                self._roots = library_roots()
            fresh = [f for f in listed if isinstance(f, str) and f not in self.named]
            self.named.update(fresh)
            files = admissible(fresh, roots=self._roots, forbidden=self.forbidden)
            if not files:
                return
            self._todo.append(files)
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(target=self._work, name="gpu-gate-bytecode", daemon=True)
                self._thread.start()

    def _work(self) -> None:
        assert self.store is not None
        while True:
            with self._lock:
                if not self._todo:
                    self._thread = None
                    return
                files = self._todo.pop(0)
            start = time.monotonic()
            # beside the jobs still running: a few processes, not one per core
            self.kept += compile_into(self.store, files, jobs=max(1, (os.cpu_count() or 4) // 4))
            self.busy_s += time.monotonic() - start

    def finish(self) -> tuple[int, float]:
        """Wait for what is being compiled; how many files were kept, and the seconds waited here."""
        start = time.monotonic()
        while True:
            with self._lock:
                thread = self._thread
            if thread is None:
                return self.kept, time.monotonic() - start
            thread.join(COMPILE_TIMEOUT_S)
            if thread.is_alive():
                return self.kept, time.monotonic() - start


def compile_into(store: Path, files: list[str], python: str | None = None, jobs: int = 0) -> int:
    """Compile ``files`` into the store (``compileall`` with the store as the bytecode prefix, in a
    process of its own, reading the file list from its input). How many were asked for; 0 when
    the compiler did not run."""
    if not files:
        return 0
    store.mkdir(parents=True, exist_ok=True)
    try:
        # -B: the compiler's own imports write nothing into the store
        subprocess.run([python or sys.executable, "-I", "-B", "-X", f"pycache_prefix={store}", "-m", "compileall",
                        "-q", "-j", str(jobs), "-i", "-"], input="\n".join(files) + "\n", text=True,
                       capture_output=True, timeout=COMPILE_TIMEOUT_S, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return 0
    return len(files)


def fresh(pyc: Path, source: str) -> bool:
    """Whether ``pyc`` is bytecode that Python would load for ``source``: the same magic number, and
    the source's modification time and size in its header (a hash-based ``.pyc`` counts as fresh)."""
    import importlib.util

    try:
        with open(pyc, "rb") as fh:
            head = fh.read(16)
        st = os.stat(source)
    except OSError:
        return False
    if len(head) < 16 or head[:4] != importlib.util.MAGIC_NUMBER:
        return False
    if int.from_bytes(head[4:8], "little") & 1:  # hash-based: checked (or not) by Python itself
        return True
    return (int.from_bytes(head[8:12], "little") == int(st.st_mtime) & 0xFFFFFFFF
            and int.from_bytes(head[12:16], "little") == st.st_size & 0xFFFFFFFF)


def prefixed(prefix: Path, source: str) -> Path:
    """Where Python looks for ``source``'s bytecode under the bytecode prefix ``prefix``."""
    src = Path(os.path.abspath(source))
    return prefix / src.parent.relative_to(src.anchor) / f"{src.stem}.{sys.implementation.cache_tag}.pyc"


def uncompiled_modules(exclude: Path) -> list[str]:
    """In a worker (Python run with a bytecode prefix): the source files of the modules imported so
    far that had no bytecode there, outside ``exclude`` (the repository). A fact for the gate, which
    decides what, if anything, it compiles."""
    if not sys.pycache_prefix:
        return []
    prefix, skip = Path(sys.pycache_prefix), str(exclude)
    out = []
    for mod in list(sys.modules.values()):
        f = getattr(mod, "__file__", None)
        if not isinstance(f, str) or not f.endswith(".py") or f.startswith(skip):
            continue
        if not fresh(prefixed(prefix, f), f):
            out.append(f)
        if len(out) >= MAX_FILES:
            break
    return out
