"""What reading a Python module found, kept between runs: the names it imports and its string
constants that name C/CUDA files, and the GPU kernels it defines (or that it is no kernel file). A
run served from the result cache spends most of its time parsing the repository's modules again to
find which specs a change selects and which kernels each judges; with this store it parses only the
modules whose bytes it has not read before (and the spec files, for their decorators).

An entry is keyed by a digest of the module's bytes, its path (relative imports depend on it) and
the code that reads modules (gpu-gate's own ``pyscan`` and ``cudascan``, byte for byte), so an
edited file, a moved one or a new gpu-gate reads afresh. It lives beside the result cache and
follows its rule (see gpu_gate.store.results): a directory that the checked-out commit carries is
never used, since anyone can write an entry that hides an import, and with it a spec the change
selects. Only the gate's own process reads and writes it.
"""
from __future__ import annotations

import contextlib
import functools
import hashlib
import json
import os
import tempfile
from collections.abc import Iterator
from pathlib import Path

FORMAT = 1


@functools.lru_cache(maxsize=1)
def _reader_digest() -> bytes:
    from .. import cudascan, pyscan

    h = hashlib.blake2b(digest_size=16)
    for mod in (pyscan, cudascan):
        h.update(Path(mod.__file__ or "").read_bytes())
    return h.digest()


@functools.lru_cache(maxsize=1)
def _kernel_reader_digest() -> bytes:
    """The code that finds a module's kernels, byte for byte, and the Python version that parses it."""
    import sys

    from .. import gpu_loads, kernel_languages, kernelscan, pyscan
    from ..cuda import names

    h = hashlib.blake2b(digest_size=16)
    h.update(f"{sys.version_info[0]}.{sys.version_info[1]}".encode())
    for mod in (kernelscan, gpu_loads, kernel_languages, pyscan, names):
        h.update(Path(mod.__file__ or "").read_bytes())
    return h.digest()


MISS = object()  # get_kernels: nothing stored (None is an answer: not a kernel file)


class ScanStore:
    def __init__(self, directory: Path) -> None:
        self.dir = directory

    def _path(self, source: bytes, module: str, kind: str = "") -> Path:
        """An entry's file: keyed by what was read (its bytes and path) and the code that read it
        (``kind`` "kernels": the kernel finder's; else the import reader's)."""
        h = hashlib.blake2b(digest_size=20)
        h.update(f"{FORMAT}\0{kind}\0{module}\0".encode() if kind else f"{FORMAT}\0{module}\0".encode())
        h.update(_kernel_reader_digest() if kind == "kernels" else _reader_digest())
        h.update(source)
        key = h.hexdigest()
        return self.dir / key[:2] / f"{key}.json"

    def get(self, source: bytes, module: str) -> tuple[frozenset[str], frozenset[str]] | None:
        """(imported names, C/CUDA path strings) of ``module`` read from ``source``, or None."""
        try:
            doc = json.loads(self._path(source, module).read_text())
        except (OSError, ValueError):
            return None
        names, strings = (doc.get("names"), doc.get("c_strings")) if isinstance(doc, dict) else (None, None)
        if not (isinstance(names, list) and isinstance(strings, list)
                and all(isinstance(x, str) for x in [*names, *strings])):
            return None
        return frozenset(names), frozenset(strings)

    def put(self, source: bytes, module: str, names: frozenset[str], strings: frozenset[str]) -> None:
        self._write(self._path(source, module), {"names": sorted(names), "c_strings": sorted(strings)})

    def get_kernels(self, source: bytes, path: str) -> frozenset[str] | None | object:
        """The kernels the Python file ``path`` with ``source`` defines, None (not a kernel file), or
        :data:`MISS`."""
        try:
            doc = json.loads(self._path(source, path, "kernels").read_text())
        except (OSError, ValueError):
            return MISS
        if not isinstance(doc, dict) or "kernels" not in doc:
            return MISS
        kernels = doc["kernels"]
        if kernels is None:
            return None
        if not (isinstance(kernels, list) and all(isinstance(x, str) for x in kernels)):
            return MISS
        return frozenset(kernels)

    def put_kernels(self, source: bytes, path: str, kernels: frozenset[str] | None) -> None:
        self._write(self._path(source, path, "kernels"), {"kernels": None if kernels is None else sorted(kernels)})

    @staticmethod
    def _write(path: Path, doc: dict[str, object]) -> None:
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".tmp-")
            with os.fdopen(fd, "w") as f:
                json.dump(doc, f)
            os.replace(tmp, path)
        except OSError:
            pass  # a store that cannot be written only costs the next run its speed


active: ScanStore | None = None


@contextlib.contextmanager
def using(store: ScanStore | None) -> Iterator[None]:
    """Make ``store`` the one the import graphs built meanwhile read and write."""
    global active
    before = active
    active = store
    try:
        yield
    finally:
        active = before
