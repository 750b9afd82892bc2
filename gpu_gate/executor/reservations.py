"""GPU memory shared by reservation across every gate on one runner.

Each job reserves what its cases need (:func:`gpu_gate.executor.slots.memory_need`) in a ledger
per GPU, in a runner-wide directory, under a file lock; it starts when the reservations on its GPU
and its own fit in the GPU's memory (a job alone on its GPU always starts), and gives its
reservation back when it ends. A snapshot of the memory free when a job starts is not enough:
under three gates per GPU on H200s, the jobs that started together each saw the same free memory
and took it, and a float64 reference ran out of memory. A reservation whose process is gone (a
gate killed) is dropped by the next one to read the ledger.

The gates running on the runner are listed there too (:func:`gate_on_runner`): a gate's doctor counts
a GPU process started by another gate as that gate's (its memory shared by reservation), not as a
stranger holding the GPU, so that two gates on one GPU slow each other down and never turn each
other red."""
from __future__ import annotations

import contextlib
import fcntl
import json
import os
import tempfile
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

from .. import procstat

GATES = "gates"  # the runner directory's list of running gates, a file per gate
ENV = "GPU_GATE_RUNNER_DIR"  # where the ledgers live; every gate on a runner must see the same one
HEADROOM = 512 << 20  # left out of each GPU's memory: the driver's and the CUDA contexts' own


def runner_dir() -> Path:
    return Path(os.environ.get(ENV) or Path(tempfile.gettempdir()) / "gpu-gate-runner")


class Reservations:
    """The ledgers of one runner's GPUs. ``total(gpu)``: the GPU's memory in bytes, None where
    unknown (then nothing is reserved and the caller decides as before)."""

    def __init__(self, total: Callable[[str], int | None], directory: Path | None = None) -> None:
        self.total = total
        self.dir = directory or runner_dir()
        self._totals: dict[str, int | None] = {}
        self._lock = threading.Lock()

    def _total(self, gpu: str) -> int | None:
        with self._lock:
            if gpu not in self._totals:
                self._totals[gpu] = self.total(gpu)
            return self._totals[gpu]

    def knows(self, gpu: str) -> bool:
        """Whether ``gpu``'s memory is known (else nothing is reserved on it)."""
        return self._total(gpu) is not None

    def try_reserve(self, gpu: str, need: int) -> str | None:
        """A token for ``need`` bytes on ``gpu`` if they fit now (or nothing else is reserved there),
        else None. Raises OSError where the ledger cannot be used."""
        total = self._total(gpu)
        with self._ledger(gpu) as entries:
            live = {t: e for t, e in entries.items() if _alive(_int(e["pid"]))}
            entries.clear()
            entries.update(live)
            held = sum(_int(e["bytes"]) for e in live.values())
            if live and total is not None and held + need > total - HEADROOM:
                return None
            token = uuid.uuid4().hex
            entries[token] = {"pid": os.getpid(), "bytes": int(need), "since": time.time()}
            return token

    def release(self, gpu: str, token: str) -> None:
        with self._ledger(gpu) as entries:
            entries.pop(token, None)

    def held(self, gpu: str) -> int:
        with self._ledger(gpu) as entries:
            return sum(_int(e["bytes"]) for e in entries.values() if _alive(_int(e["pid"])))

    @contextlib.contextmanager
    def _ledger(self, gpu: str) -> Iterator[dict[str, dict[str, float]]]:
        self.dir.mkdir(parents=True, exist_ok=True, mode=0o1777)
        path = self.dir / f"gpu{gpu}.json"
        with open(self.dir / f"gpu{gpu}.lock", "a+") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            try:
                try:
                    entries = _entries(json.loads(path.read_text() or "{}"))
                except (OSError, ValueError):
                    entries = {}
                yield entries
                tmp = path.with_suffix(f".{os.getpid()}.{threading.get_ident()}.tmp")
                tmp.write_text(json.dumps(entries))
                os.replace(tmp, path)
            finally:
                fcntl.flock(lock, fcntl.LOCK_UN)


def _entries(raw: object) -> dict[str, dict[str, float]]:
    """The ledger's well-formed entries (token -> pid, bytes, since); one that is not (a file
    written by another version, or damaged) is dropped, as a dead gate's is."""
    if not isinstance(raw, dict):
        return {}
    out: dict[str, dict[str, float]] = {}
    for token, e in raw.items():
        if isinstance(e, dict) and all(isinstance(e.get(k), (int, float)) and not isinstance(e.get(k), bool)
                                       for k in ("pid", "bytes")):
            since = e.get("since")
            out[str(token)] = {"pid": e["pid"], "bytes": e["bytes"],
                               "since": float(since) if isinstance(since, (int, float)) else 0.0}
    return out


def _alive(pid: int) -> bool:
    if pid <= 0:  # not a process id (kill would signal a whole process group): a stale entry
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def _int(value: object) -> int:
    """A ledger number; anything else (an entry another version wrote, a hand edit) counts as 0."""
    return int(value) if isinstance(value, (int, float, str)) and str(value).lstrip("-").isdigit() else 0


@contextlib.contextmanager
def gate_on_runner(directory: Path | None = None) -> Iterator[None]:
    """This gate listed as running on the runner while the block runs (a file named by its process
    id, the process's start time and a token; removed at the end). Where the list cannot be
    written, the gate runs unlisted: the other gates' doctors then count its processes as
    strangers', as before."""
    d = (directory or runner_dir()) / GATES
    path: Path | None = None
    try:
        d.parent.mkdir(parents=True, exist_ok=True, mode=0o1777)
        d.mkdir(exist_ok=True, mode=0o1777)
        path = d / f"{os.getpid()}-{_started(os.getpid()) or 0}-{uuid.uuid4().hex[:12]}"
        path.touch()
    except OSError:
        path = None
    try:
        yield
    finally:
        if path is not None:
            with contextlib.suppress(OSError):
                path.unlink()


def gates_on_runner(directory: Path | None = None) -> frozenset[int]:
    """The process ids of the other gates running on the runner. An entry whose process is gone, or
    whose id now names a process started at another time (a reused id), is removed."""
    d = (directory or runner_dir()) / GATES
    try:
        names = [p.name for p in d.iterdir()]
    except OSError:
        return frozenset()
    own = os.getpid()
    live: set[int] = set()
    for name in names:
        parts = name.split("-")
        if len(parts) != 3 or not parts[0].isdigit() or not parts[1].isdigit():
            continue
        pid = int(parts[0])
        started = _started(pid) if _alive(pid) else None
        if started is None or (parts[1] != "0" and int(parts[1]) != started):
            with contextlib.suppress(OSError):
                (d / name).unlink()
            continue
        if pid != own:
            live.add(pid)
    return frozenset(live)


def _started(pid: int) -> int | None:
    """When process ``pid`` started (clock ticks after boot, from /proc); None where /proc cannot say."""
    s = procstat.stat(pid)
    return None if s is None else s.start_ticks
