"""In the worker: its spec's kept kernels (see :mod:`gpu_gate.store.compiled`), copied into its own
Triton cache directory while it imports torch and the spec.

The gate keeps what the base's code compiled, per spec, in a shelf of the result cache. It used to
copy the shelf into each worker's cache before starting the worker: on an H100 runner, 3.8 s
before the equivalence job's judge could start, and as long for the determinism job's. The sandbox
now shows the shelf to the head's and the base's workers (never to the reference's), read-only, at
a mount point in the worker's own directory (``.kept``: wherever the result cache is, even inside a
repository whose path shows the base's tree to the base's worker). The worker copies it itself, on
a thread, from its first line on; importing torch and the spec takes longer, so the copy costs the
job nothing. Before it answers ``load`` (the judge's cases, and the compiling sibling's, come
after), the worker waits for the copy to end: a kernel is then found compiled, as before.

Trust: the shelf is read-only in the sandbox (a worker cannot change what a later run loads); the
copy is the worker's own, in its own directory, as the gate's copy was. A worker that skips the
copy only compiles more.
"""
from __future__ import annotations

import os
import threading
import time
from pathlib import Path
from typing import Any


class Seeding:
    """The copy, on a thread of its own; :meth:`wait` ends it and says what it did."""

    def __init__(self, shelf: Path, dest: Path) -> None:
        self.copied = 0
        self.seconds = 0.0
        self.error: str | None = None
        self._thread = threading.Thread(target=self._copy, args=(shelf, dest), name="gpu-gate-seed", daemon=True)
        self._thread.start()

    def _copy(self, shelf: Path, dest: Path) -> None:
        from ..store.compiled import seed

        start = time.monotonic()
        try:
            self.copied = seed(shelf, dest)
        except Exception as exc:  # noqa: BLE001 - nothing copied: the worker compiles what it needs
            self.error = f"{type(exc).__name__}: {exc}"[:200]
        self.seconds = time.monotonic() - start

    def wait(self) -> dict[str, float]:
        start = time.monotonic()
        self._thread.join()
        return {"seed_wait_s": time.monotonic() - start, "seed_s": self.seconds, "seeded": self.copied}


def start(context: dict[str, Any]) -> Seeding | None:
    """Start copying the shelf the gate shows this worker (its context's ``shelf``) into the Triton
    cache directory of its environment; None where there is no shelf or no such directory."""
    shelf, dest = context.get("shelf"), os.environ.get("TRITON_CACHE_DIR")
    if not shelf or not dest or not Path(shelf).is_dir():
        return None
    return Seeding(Path(shelf), Path(dest))
