"""On a runner with two GPUs, a job pinned to one cannot reach the other.

The attack: the candidate starts a process with CUDA_VISIBLE_DEVICES unset and counts the GPUs CUDA
gives it; where it finds more than its own it could load, fill or hang the GPU another job is judged
on, and here it says so by returning a wrong result. In a bwrap sandbox that holds only its own
GPU's device node it finds one. The same job with every node bound (what the sandbox did before) is
run too: there the attack succeeds, which shows that the node restriction is what stops it. The
twin, a plain CUDA spec on the same GPU, must pass.
"""
from __future__ import annotations

import dataclasses
import re
import shutil
from pathlib import Path

import pytest

from gpu_gate.executor import argv, gpu_nodes, sandbox
from gpu_gate.executor.options import ExecOptions
from gpu_gate.executor.scheduling import execute
from gpu_gate.findings import Status
from gpu_gate.protocol.jobs import Job, SpecRef

pytestmark = pytest.mark.gpu

SPEC = '''\
import os
import subprocess
import sys

import torch

import gpu_gate as gg

COUNT = "import torch; print(torch.cuda.device_count())"


_SEEN: list[int] = []


def _others() -> int:
    if _SEEN:
        return _SEEN[0]
    env = {k: v for k, v in os.environ.items() if k != "CUDA_VISIBLE_DEVICES"}
    r = subprocess.run([sys.executable, "-c", COUNT], env=env, capture_output=True, text=True, timeout=120)
    _SEEN.append(int(r.stdout.strip() or 0) - 1)
    return _SEEN[0]


@gg.spec(dims={"n": gg.Dim(1000, 1000)}, inputs={"x": gg.Tensor(("n",), dtypes=["float32"])},
         reference=lambda x: x * 2, devices=["cuda"])
def reach(x):
    assert x.is_cuda and torch.cuda.device_count() == 1
    return x * (3 if _others() > 0 else 2)


@gg.spec(dims={"n": gg.Dim(1000, 1000)}, inputs={"x": gg.Tensor(("n",), dtypes=["float32"])},
         reference=lambda x: x * 2, devices=["cuda"])
def plain(x):
    return x * 2
'''


def _jobs(root: Path) -> list[Job]:
    (root / "gate").mkdir(parents=True)
    (root / "gate" / "nodes_gate.py").write_text(SPEC)
    return [Job(id=f"equivalence:gate/nodes_gate.py::{name}", check="equivalence", level="required",
                kernels=(), spec=SpecRef("gate/nodes_gate.py", name),
                options={"cases": 2, "growth": False, "shrink": False}) for name in ("reach", "plain")]


def _bwrap() -> sandbox.Available:
    bwrap = shutil.which("bwrap")
    if bwrap is None or sandbox._try([bwrap, *sandbox._bwrap_base(), "--", "true"]) is not None:
        pytest.fail(f"bwrap does not work on this GPU runner: {sandbox.probe().detail} (install bubblewrap)")
    return sandbox.Available("bwrap", bwrap, "bwrap")


def test_a_job_on_one_gpu_cannot_reach_the_other(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    found = gpu_nodes.gpus()
    if len(found) < 2:
        pytest.skip(f"needs two GPUs; the driver lists {len(found)}")
    box = _bwrap()
    # the second GPU in PCI bus order, named by index as a runner's CUDA_VISIBLE_DEVICES would
    own = argv.job_gpu("1", box)
    assert own is not None and own.whole is None, own
    second = sorted(found, key=lambda g: g.bus)[1]
    assert own.cuda_name == second.uuid and f"/dev/nvidia{second.minor}" in own.nodes
    assert [n for n in own.nodes if re.fullmatch(r"/dev/nvidia\d+", n)] == [f"/dev/nvidia{second.minor}"]
    opts = ExecOptions(repo_root=tmp_path, gpus=("1",), timeout_s=600, sandbox=box, sandbox_mode="required",
                       health_probe=lambda g: None)
    res = {r.job_id.split("::")[1]: r for r in execute(_jobs(tmp_path), opts)}
    assert res["plain"].status is Status.PASSED, (res["plain"].reason, res["plain"].log_tail)
    assert res["reach"].status is Status.PASSED, (res["reach"].reason, res["reach"].findings, res["reach"].log_tail)
    # every node bound, as before: the attack reaches the other GPU
    monkeypatch.setattr(argv, "job_gpu", lambda gpu, avail: None)
    again = tmp_path / "before"
    before = {r.job_id.split("::")[1]: r
              for r in execute(_jobs(again), dataclasses.replace(opts, repo_root=again))}
    assert before["plain"].status is Status.PASSED, (before["plain"].reason, before["plain"].log_tail)
    assert before["reach"].status is Status.FAILED, (before["reach"].reason, before["reach"].log_tail)
