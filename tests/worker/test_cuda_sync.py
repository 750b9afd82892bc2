"""A worker's host thread sleeps while it waits for its GPU (the primary context's scheduling flag
set to blocking sync before torch makes the context), rather than holding a core by spinning.

On the CPU the driver is a stand-in shared library, built here with the C compiler, that keeps the
primary context's flags as the real driver does and answers ``cuDevicePrimaryCtxGetState``; the
real driver is exercised by ``tests/gpu/test_cuda_sync_gpu.py``."""
from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from gpu_gate.executor import argv
from gpu_gate.executor.options import ExecOptions
from gpu_gate.worker import cuda_sync
from gpu_gate.worker.serve import CudaContext

DRIVER = r"""
static unsigned flags[4];
static int inited;
int cuInit(unsigned f) { inited = 1; return 0; }
int cuDeviceGetCount(int *n) { if (!inited) return 3; *n = DEVICES; return 0; }
int cuDeviceGet(int *d, int i) { if (!inited || i >= DEVICES) return 101; *d = i; return 0; }
int cuDevicePrimaryCtxSetFlags_v2(int d, unsigned f) { if (FAIL) return 999; flags[d] = f; return 0; }
int cuDevicePrimaryCtxGetState(int d, unsigned *f, int *active) { *f = flags[d]; *active = 0; return 0; }
"""


def _driver(tmp_path: Path, devices: int = 2, fail: bool = False) -> str:
    cc = shutil.which("cc") or shutil.which("gcc")
    if cc is None:
        pytest.skip("no C compiler to build the stand-in driver")
    src, lib = tmp_path / "driver.c", tmp_path / f"libcuda-{devices}-{int(fail)}.so"
    src.write_text(DRIVER)
    subprocess.run([cc, "-shared", "-fPIC", f"-DDEVICES={devices}", f"-DFAIL={int(fail)}", "-o", str(lib), str(src)],
                   check=True)
    return str(lib)


def test_blocking_sync_is_set_on_every_visible_device(tmp_path: Path) -> None:
    lib = _driver(tmp_path)
    assert cuda_sync.mode_of(lib) == "auto"  # the driver's default: spin while cores are free
    assert cuda_sync.set_mode("blocking", lib) is None
    assert cuda_sync.mode_of(lib) == "blocking"
    assert cuda_sync.set_mode("yield", lib) is None and cuda_sync.mode_of(lib) == "yield"


def test_what_cannot_be_set_says_why_and_changes_nothing(tmp_path: Path) -> None:
    assert "unknown CUDA sync mode 'sleepy'" in (cuda_sync.set_mode("sleepy", _driver(tmp_path)) or "")
    assert "no CUDA driver" in (cuda_sync.set_mode("blocking", str(tmp_path / "absent.so")) or "")
    assert cuda_sync.mode_of(str(tmp_path / "absent.so")) is None
    failing = _driver(tmp_path, fail=True)
    assert "CUresult 999" in (cuda_sync.set_mode("blocking", failing) or "")
    assert cuda_sync.mode_of(failing) == "auto"


def test_the_context_thread_sets_the_mode_before_it_makes_the_context(monkeypatch: pytest.MonkeyPatch) -> None:
    seen: list[str] = []
    monkeypatch.setattr(cuda_sync, "set_mode", lambda mode: seen.append(mode) or "no CUDA driver (test)")
    ctx = CudaContext("blocking")  # no GPU here: the context is not made, the mode was asked for first
    ctx.thread.join()
    assert seen == ["blocking"] and ctx.sync_error == "no CUDA driver (test)"
    seen.clear()
    CudaContext().thread.join()  # no mode given (a worker of an older judge): nothing set
    assert seen == []


def test_gpu_workers_are_told_to_sleep_unless_the_runner_says_otherwise(tmp_path: Path,
                                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    opts = ExecOptions(repo_root=tmp_path, gpus=("0",))
    monkeypatch.delenv("GPU_GATE_CUDA_SYNC", raising=False)
    assert argv._worker_context(opts, "0")["cuda_sync"] == "blocking"
    assert "cuda_sync" not in argv._worker_context(opts, None)  # a CPU job has no CUDA context
    monkeypatch.setenv("GPU_GATE_CUDA_SYNC", "spin")
    assert argv._worker_context(opts, "0")["cuda_sync"] == "spin"
    # a worker compute-sanitizer runs keeps CUDA's default
    assert "cuda_sync" not in argv._worker_context(opts, "0", under_tool=True)


def test_only_the_workers_a_sanitizer_runs_keep_cuda_s_default() -> None:
    from gpu_gate.judge.checks import CHECKS

    tools = {check for check, info in CHECKS.items() if info.wrapping() is not None}
    assert {"memcheck", "racecheck", "synccheck", "initcheck"} <= tools
    assert not {"equivalence", "determinism"} & tools
