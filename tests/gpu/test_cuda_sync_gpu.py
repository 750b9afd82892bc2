"""On a real driver: the blocking-sync mode a worker sets before torch makes its context is the
context's mode, and a worker waiting for a long GPU wait then uses almost no CPU, where CUDA's
default spins a core for the whole wait."""
from __future__ import annotations

import json
import subprocess
import sys

import pytest

pytestmark = pytest.mark.gpu

WAIT = r"""
import json, sys, time
from gpu_gate.worker import cuda_sync
mode = sys.argv[1]
err = cuda_sync.set_mode(mode) if mode != "none" else None
import torch
torch.empty(1, device="cuda"); torch.cuda.synchronize()
cycles = int(torch.cuda.get_device_properties(0).clock_rate * 1e3 * 1.5)  # about 1.5 s of GPU spin
cpu0, wall0 = time.process_time(), time.monotonic()
torch.cuda._sleep(cycles)
torch.cuda.synchronize()
print(json.dumps({"err": err, "mode": cuda_sync.mode_of(), "cpu": time.process_time() - cpu0,
                  "wall": time.monotonic() - wall0}))
"""


def _wait(mode: str) -> dict[str, object]:
    out = subprocess.run([sys.executable, "-c", WAIT, mode], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_blocking_sync_is_the_context_s_mode_and_a_wait_costs_no_core() -> None:
    spin, blocking = _wait("none"), _wait("blocking")
    assert blocking["err"] is None and blocking["mode"] == "blocking"
    assert spin["mode"] == "auto"
    assert float(spin["wall"]) > 0.5 and float(blocking["wall"]) > 0.5  # the GPU did wait
    # CUDA's default spins for the wait; blocking sleeps through it
    assert float(spin["cpu"]) > 0.5 * float(spin["wall"]), spin
    assert float(blocking["cpu"]) < 0.2 * float(blocking["wall"]), blocking
