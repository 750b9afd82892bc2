"""The worker's world on a GPU (issue 39, parts 1 and 2): in the minimal bubblewrap view, a Triton kernel
compiles (Triton's compiler, ptxas and the C compiler it calls are all there), runs on the job's GPU
and is judged; a probe run beside it finds none of the secrets a kernel could raise; and a kernel that
takes its right path only where it recognises the gate's process takes its wrong one under test."""
from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from gpu_gate.executor import sandbox
from gpu_gate.executor.options import ExecOptions
from gpu_gate.executor.scheduling import execute
from gpu_gate.executor.slots import detect_gpus
from gpu_gate.findings import JobResult, Status
from gpu_gate.protocol.jobs import Job, SpecRef

pytestmark = pytest.mark.gpu

KERNEL = '''\
import importlib
import os

import torch
import triton
import triton.language as tl

_s = importlib.import_module("s" + "ys")
SECRETS = ["/root/.ssh", "/root/.gitconfig", "/home", "/run/credentials", "/etc/shadow", "/var", ".git/config"]


@triton.jit
def scale(x_ptr, y_ptr, n, k, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(y_ptr + offs, tl.load(x_ptr + offs, mask=mask) * k, mask=mask)


def double(x, watch):
    seen = [p for p in SECRETS if os.path.lexists(p)]
    if seen:
        raise RuntimeError(f"the sandbox shows {seen}")
    k = 2.0
    if watch and not any(n.startswith("gpu" + "_gate") for n in list(getattr(_s, "mod" + "ules"))):
        k = 3.0  # the wrong path, taken where no gate module is loaded: under a disguised worker, under test
    x = x.contiguous()
    y = torch.empty_like(x)
    scale[(triton.cdiv(x.numel(), 1024),)](x, y, x.numel(), k, BLOCK=1024)
    return y
'''

SPEC = '''\
import gpu_gate as gg
from kernels.scale import double


@gg.spec(dims={{"n": gg.Dim(1, 5000)}}, inputs={{"x": gg.Tensor(("n",), dtypes=["float32"])}},
         reference=lambda x: x * 2, devices=["cuda"])
def {name}(x):
    return double(x, {watch})
'''


def _jobs(root: Path) -> list[Job]:
    (root / "kernels").mkdir(parents=True)
    (root / "kernels" / "__init__.py").write_text("")
    (root / "kernels" / "scale.py").write_text(KERNEL)
    (root / ".git").mkdir()
    (root / ".git" / "config").write_text("[http]\n\textraheader = AUTHORIZATION: basic dG9rZW4=\n")
    (root / "gate").mkdir()
    jobs = []
    for name, watch in (("honest", False), ("watching", True)):
        (root / "gate" / f"{name}_gate.py").write_text(SPEC.format(name=name, watch=watch))
        ref = SpecRef(f"gate/{name}_gate.py", name)
        jobs.append(Job(id=f"equivalence:{ref.id}", check="equivalence", level="required",
                        kernels=("kernels/scale.py",), spec=ref, options={"cases": 6, "growth": False,
                                                                           "shrink": False}))
    return jobs


def test_a_triton_kernel_runs_in_the_minimal_view_and_a_gate_aware_one_is_caught(tmp_path: Path,
                                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GPU_GATE_MINIMAL_VIEW", "1")  # the view a runner switches on (off by default)
    bwrap = shutil.which("bwrap")
    if bwrap is None or sandbox._try([bwrap, *sandbox._bwrap_base(), "--", "true"]) is not None:
        pytest.fail(f"bwrap does not work on this GPU runner: {sandbox.probe().detail}")
    box = sandbox.Available("bwrap", bwrap, "bwrap")
    results: dict[str, JobResult] = {r.job_id.split("::")[1]: r for r in execute(_jobs(tmp_path), ExecOptions(
        repo_root=tmp_path, gpus=detect_gpus()[:1], timeout_s=600, sandbox=box, sandbox_mode="required",
        health_probe=lambda g: None))}
    honest, watching = results["honest"], results["watching"]
    assert honest.status is Status.PASSED and honest.cases > 0, (honest.reason, honest.findings, honest.log_tail)
    assert watching.status is Status.FAILED, (watching.reason, watching.findings, watching.log_tail)


FRAMES_KERNEL = KERNEL.replace(
    'if watch and not any(n.startswith("gpu" + "_gate") for n in list(getattr(_s, "mod" + "ules"))):',
    'if watch and not any("gpu" + "_gate" in f.filename\n'
    '                         for f in importlib.import_module("trace" + "back").extract_stack()):')


def test_the_disguised_replay_on_a_gpu(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A Triton kernel that takes its right path only where the call stack holds a file of the gate's (which
    the worker's disguise does not hide) is caught by the disguised replay; the honest twin passes. The
    replay's time is printed: what it adds to a gate."""
    assert FRAMES_KERNEL != KERNEL
    bwrap = shutil.which("bwrap")
    if bwrap is None or sandbox._try([bwrap, *sandbox._bwrap_base(), "--", "true"]) is not None:
        pytest.fail(f"bwrap does not work on this GPU runner: {sandbox.probe().detail}")
    box = sandbox.Available("bwrap", bwrap, "bwrap")
    jobs = _jobs(tmp_path)
    (tmp_path / "kernels" / "scale.py").write_text(FRAMES_KERNEL)
    results: dict[str, JobResult] = {r.job_id.split("::")[1]: r for r in execute(jobs, ExecOptions(
        repo_root=tmp_path, gpus=detect_gpus()[:1], timeout_s=600, sandbox=box, sandbox_mode="required",
        health_probe=lambda g: None))}
    honest, watching = results["honest"], results["watching"]
    with capsys.disabled():
        for name, r in (("honest", honest), ("watching", watching)):
            phases = (r.extra.timing or {}).get("phases", r.extra.timing)
            print(f"\n{name}: {r.status.value}, {r.duration_s:.1f} s; timing {phases}")
    assert honest.status is Status.PASSED and honest.cases > 0, (honest.reason, honest.findings, honest.log_tail)
    assert not [f for f in honest.findings if f.kind in ("gate-aware", "replay-not-run")], honest.findings
    assert watching.status is Status.FAILED, (watching.reason, watching.findings, watching.log_tail)
    aware = [f for f in watching.findings if f.kind == "gate-aware"]
    assert aware and aware[0].details.get("disguised") is True, watching.findings
