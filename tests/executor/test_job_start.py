"""What every job's start reads about the machine is worked out once per run, before the first wave of
jobs starts at once (``scheduling.prime``): each job of the first wave worked it out again, in the
gate's one process, and on two H200s the first 16 jobs of a plan waited 22 s each for their judge."""
from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest

from gpu_gate.executor import disguised, sandbox, scheduling
from gpu_gate.executor.options import ExecOptions


def _counting(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Count (and slow down, as a runner with many packages is) the scan of installed distributions."""
    calls: list[int] = []
    real = disguised.metadata.packages_distributions

    def slow() -> object:
        calls.append(1)
        time.sleep(0.2)
        return real()

    monkeypatch.setattr(disguised.metadata, "packages_distributions", slow)
    disguised.gate_files.cache_clear()
    return calls


def _first_wave(n: int) -> float:
    """``n`` jobs' starts at once, each asking for the gate's files; the longest wait."""
    waits: list[float] = []
    together = threading.Barrier(n)

    def start() -> None:
        together.wait()
        t = time.monotonic()
        disguised.gate_files()
        waits.append(time.monotonic() - t)

    threads = [threading.Thread(target=start) for _ in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return max(waits)


def test_without_priming_every_job_of_the_first_wave_scans_the_installation(monkeypatch: pytest.MonkeyPatch) -> None:
    calls = _counting(monkeypatch)
    _first_wave(8)
    assert len(calls) > 1  # the herd: the cache fills only once a scan has finished
    disguised.gate_files.cache_clear()


def test_primed_the_first_wave_finds_the_gates_files_at_once(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    calls = _counting(monkeypatch)
    scheduling.prime(ExecOptions(repo_root=tmp_path, gpus=(), sandbox=sandbox.Available("none", None, "test")))
    assert len(calls) == 1
    assert _first_wave(8) < 0.1 and len(calls) == 1
    dirs, files, _ = disguised.gate_files()
    import gpu_gate

    assert Path(gpu_gate.__file__).resolve().parent in dirs  # the same answer, kept
    disguised.gate_files.cache_clear()


def test_execute_primes_before_the_jobs_start(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    primed: list[ExecOptions] = []
    monkeypatch.setattr(scheduling, "prime", primed.append)
    opts = ExecOptions(repo_root=tmp_path, gpus=(), sandbox=sandbox.Available("none", None, "test"), pycache=tmp_path)
    assert scheduling.execute([], opts) == []
    assert len(primed) == 1
