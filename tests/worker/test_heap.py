"""The worker's C heap serves a large allocation the same way whatever the process did before
(issue 40: a CPU speed check once timed the same sum, renamed, at 10x the base's).

Counted in page faults, not seconds: a 1M-row sum through float64 (two 8 MiB blocks a call) run in
four process histories. Without fixed thresholds the count per call depends on the history (16 MiB
faulted in on every call in some processes, nothing in others, from one run to the next even in the
same history); with them, nothing in any."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor

import pytest

CALLS = r"""
import json, resource, sys
history, fixed = sys.argv[1], sys.argv[2] == "1"
if fixed:
    from gpu_gate.worker.heap import steady
    assert steady() is None
import torch
torch.set_num_threads(1)
keep = []
if history == "ctypes-first":  # a C library loaded before torch
    import ctypes
    ctypes.CDLL(None)
if history == "freed-large":  # an earlier large block freed: glibc raises its threshold
    y = torch.empty(64 << 20, dtype=torch.uint8)
    del y
x = torch.randn(1048576, 1)
faults = []
for i in range(30):
    g = x.clone()  # fresh inputs each call, as the speed check gives them
    if history == "small-blocks" and i % 7 == 3:
        keep.append(torch.empty(300))  # small long-lived blocks land between the large ones
    f0 = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    r = g.double().sum(-1).to(g.dtype)
    faults.append(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - f0)
    del g, r
print(json.dumps(sorted(faults[10:])[10]))  # the median call after the warm-up
"""

HISTORIES = ("fresh", "freed-large", "small-blocks", "ctypes-first")


def _faults(history: str, fixed: bool) -> int:
    # as a worker's environment is: without the tests' OpenMP wait policy (tests/conftest.py), which
    # changes the heap's history too (the unfixed count is 0 more often with it)
    env = {k: v for k, v in os.environ.items() if k != "OMP_WAIT_POLICY"}
    p = subprocess.run([sys.executable, "-c", CALLS, history, "1" if fixed else "0"], capture_output=True, text=True,
                       timeout=120, env=env)
    assert p.returncode == 0, p.stderr[-2000:]
    return int(json.loads(p.stdout.strip().splitlines()[-1]))


def test_every_history_serves_the_call_without_page_faults() -> None:
    runs = [(h, i) for h in HISTORIES for i in range(3)]  # the same history, again: it varies by itself
    with ThreadPoolExecutor(4) as pool:
        unfixed = list(pool.map(lambda r: _faults(r[0], False), runs))
    if max(unfixed) < 1000:
        pytest.skip(f"this C library served the call without faults in all {len(runs)} runs anyway: {unfixed}")
    # what the speed check met without it: the same code on the same inputs faults in 16 MiB a call in
    # some processes and nothing in others (seen here: even in the same history, run twice)
    assert min(unfixed) == 0, unfixed
    with ThreadPoolExecutor(4) as pool:
        fixed = list(pool.map(lambda r: _faults(r[0], True), runs))
    assert fixed == [0] * len(runs), list(zip(runs, fixed))


def test_steady_says_why_where_it_cannot(monkeypatch: pytest.MonkeyPatch) -> None:
    """A C library without mallopt (musl): said so, nothing set."""
    import ctypes

    from gpu_gate.worker import heap

    class NoMallopt:
        def __init__(self, name: object) -> None:
            assert name is None  # the library the process runs on: no search

        def __getattr__(self, name: str) -> object:
            raise AttributeError(name)

    monkeypatch.setattr(ctypes, "CDLL", NoMallopt)
    assert "no mallopt" in (heap.steady() or "")
