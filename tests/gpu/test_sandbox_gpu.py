"""GPU jobs in the sandbox: CUDA, Triton and compute-sanitizer work inside it, and catch what they catch outside.

The executor runs a real repository's spec with ``runner.sandbox: required``: the worker sees the
NVIDIA device nodes and a private /tmp (Triton's cache lives there), compute-sanitizer runs the sandbox
from outside it (bwrap; inside it under unshare), and memcheck still catches a planted unmasked Triton tail overrun,
while the masked twin passes. Without a working sandbox these tests fail rather than pass quietly.
"""
from __future__ import annotations

import shutil
import time
from pathlib import Path

import pytest

from gpu_gate.executor import sandbox
from gpu_gate.cuda import sanitizer as cs
from gpu_gate.executor.options import ExecOptions
from gpu_gate.executor.slots import detect_gpus
from gpu_gate.executor.scheduling import execute
from gpu_gate.findings import JobResult, Status
from gpu_gate.protocol.jobs import Job, SpecRef
from test_sanitizer_outside import forgery  # noqa: E402  (tests/ is on sys.path)

pytestmark = pytest.mark.gpu

KERNEL = '''\
import torch
import triton
import triton.language as tl


@triton.jit
def copy_nomask(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(y_ptr + offs, tl.load(x_ptr + offs) * 2.0)  # BUG: no tail mask


@triton.jit
def copy_masked(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(y_ptr + offs, tl.load(x_ptr + offs, mask=mask) * 2.0, mask=mask)


def double(x, kernel):
    x = x.contiguous()
    y = torch.empty_like(x)
    n = x.numel()
    kernel[(triton.cdiv(n, 1024),)](x, y, n, BLOCK=1024)
    return y
'''

SPEC = '''\
import gpu_gate as gg
from kernels.copy import double, {kernel}


@gg.spec(dims={{"n": gg.Dim(1000, 1000)}}, inputs={{"x": gg.Tensor(("n",), dtypes=["float32"])}},
         reference=lambda x: x * 2, devices=["cuda"])
def {name}(x):
    return double(x, {kernel})
'''


def _repo(root: Path) -> list[Job]:
    (root / "kernels").mkdir(parents=True)
    (root / "kernels" / "__init__.py").write_text("")
    (root / "kernels" / "copy.py").write_text(KERNEL)
    (root / "gate").mkdir()
    jobs = []
    for name, kernel in (("bug", "copy_nomask"), ("clean", "copy_masked")):
        (root / "gate" / f"{name}_gate.py").write_text(SPEC.format(name=name, kernel=kernel))
        ref = SpecRef(f"gate/{name}_gate.py", name)
        jobs.append(Job(id=f"memcheck:{ref.id}", check="memcheck", level="required", kernels=("kernels/copy.py",),
                        spec=ref, options={"cases": 2, "kernel_names": [kernel]}))
        jobs.append(Job(id=f"equivalence:{ref.id}", check="equivalence", level="required",
                        kernels=("kernels/copy.py",), spec=ref,
                        options={"cases": 4, "growth": False, "shrink": False}))
    return jobs


def _boxes() -> list[sandbox.Available]:
    """Every kind of sandbox that starts on this runner (bwrap first, which the runner image installs)."""
    out = []
    bwrap, unshare = shutil.which("bwrap"), shutil.which("unshare")
    if bwrap and sandbox._try([bwrap, *sandbox._bwrap_base(), "--", "true"]) is None:
        out.append(sandbox.Available("bwrap", bwrap, "bwrap"))
    if unshare and sandbox._try([*sandbox._unshare_base(unshare), "--", "true"]) is None:
        out.append(sandbox.Available("unshare", unshare, "unshare"))
    return out


BOXES = _boxes() if shutil.which("nvidia-smi") else []


def _box(kind: str) -> sandbox.Available:
    box = next((b for b in BOXES if b.kind == kind), None)
    if box is None and kind == "bwrap":
        pytest.fail(f"bwrap does not work on this GPU runner: {sandbox.probe().detail} (install bubblewrap)")
    if box is None:
        pytest.skip(f"{kind} does not start on this runner")
    return box


@pytest.mark.parametrize("kind", ["bwrap", "unshare"])
def test_memcheck_on_the_sandbox_catches_the_tail_overrun_and_passes_the_twin(tmp_path: Path, kind: str) -> None:
    if cs.locate(None) is None:
        pytest.fail("compute-sanitizer not found on this GPU runner")
    box = _box(kind)
    gpus = detect_gpus()[:1]
    start = time.monotonic()
    results: dict[str, JobResult] = {r.job_id: r for r in execute(_repo(tmp_path), ExecOptions(
        repo_root=tmp_path, gpus=gpus, timeout_s=600, sandbox=box, sandbox_mode="required",
        health_probe=lambda g: None))}
    took = time.monotonic() - start
    bug = results["memcheck:gate/bug_gate.py::bug"]
    clean = results["memcheck:gate/clean_gate.py::clean"]
    if kind == "unshare" and Status.ERROR in (bug.status, clean.status):
        # On an H100 the tool, inside an unshare sandbox, never saw the worker's CUDA calls. Whatever
        # the cause, nothing may pass that was not checked.
        assert Status.PASSED not in (bug.status, clean.status), (bug.reason, clean.reason)
        pytest.xfail(f"compute-sanitizer in an unshare sandbox checked nothing, and failed closed: {bug.reason}")
    assert bug.status is Status.FAILED, (bug.reason, bug.findings, bug.log_tail)
    assert any(f.kind.startswith("invalid-global") for f in bug.findings), bug.findings
    assert clean.status is Status.PASSED, (clean.reason, clean.findings, clean.log_tail)
    # The twin's equivalence job ran on CUDA in the sandbox (Triton compiled into the private /tmp).
    eq = results["equivalence:gate/clean_gate.py::clean"]
    assert eq.status is Status.PASSED and eq.cases > 0, (eq.reason, eq.log_tail)
    assert not [f for r in results.values() for f in r.findings if f.kind == "escaped-process"]
    print(f"sandbox {box.kind} ({box.detail}): 4 GPU jobs in {took:.1f}s")


# The candidate rewrites compute-sanitizer's report wherever it can find it: named on the tool's
# command line, in its own directory or the one above; now, and again from a child process the moment
# the tool has finished writing it (one harmless record, so that the tool's error code is "explained").
FORGE = forgery("copy_nomask") + '''
import time

_started = []


def _forge(wait):
    end = time.monotonic() + (120 if wait else 0)
    while True:
        for path in _reports():
            try:
                text = open(path).read()
                if text.rstrip().endswith("</ComputeSanitizerOutput>") and text != FORGED:
                    with open(path, "w") as f:
                        f.write(FORGED)
                    if wait:
                        os._exit(0)
            except OSError:
                pass
        if time.monotonic() > end:
            return
        time.sleep(0.005)


def forge():
    _forge(False)
    if not _started:
        _started.append(1)
        if os.fork() == 0:
            _forge(True)
            os._exit(0)
'''

FORGER = '''\
import gpu_gate as gg
from kernels.copy import double, copy_nomask
from kernels.forge import forge


@gg.spec(dims={"n": gg.Dim(1000, 1000)}, inputs={"x": gg.Tensor(("n",), dtypes=["float32"])},
         reference=lambda x: x * 2, devices=["cuda"])
def forger(x):
    forge()
    return double(x, copy_nomask)
'''


def test_a_candidate_that_rewrites_the_sanitizers_report_is_still_caught(tmp_path: Path) -> None:
    """compute-sanitizer's front end runs outside the worker's bwrap sandbox: the report it writes is
    out of the candidate's reach, and the planted overrun is reported whatever the candidate does.
    (Under unshare the tool runs inside, and this attack is not stopped: tests/executor/test_sanitizer_outside.py.)"""
    if cs.locate(None) is None:
        pytest.fail("compute-sanitizer not found on this GPU runner")
    box = _box("bwrap")
    jobs = [j for j in _repo(tmp_path) if j.check == "memcheck"]
    (tmp_path / "kernels" / "forge.py").write_text(FORGE)
    (tmp_path / "gate" / "forger_gate.py").write_text(FORGER)
    ref = SpecRef("gate/forger_gate.py", "forger")
    jobs.append(Job(id=f"memcheck:{ref.id}", check="memcheck", level="required",
                    kernels=("kernels/copy.py",), spec=ref, options={"cases": 2, "kernel_names": ["copy_nomask"]}))
    results = {r.job_id: r for r in execute(jobs, ExecOptions(
        repo_root=tmp_path, gpus=detect_gpus()[:1], timeout_s=600, sandbox=box, sandbox_mode="required",
        health_probe=lambda g: None))}
    forger = results["memcheck:gate/forger_gate.py::forger"]
    assert forger.status is Status.FAILED, (forger.reason, forger.findings, forger.log_tail)
    assert any(f.kind.startswith("invalid-global") for f in forger.findings), forger.findings
    # the twins, under the same tool in the same run
    assert results["memcheck:gate/bug_gate.py::bug"].status is Status.FAILED
    clean = results["memcheck:gate/clean_gate.py::clean"]
    assert clean.status is Status.PASSED, (clean.reason, clean.findings, clean.log_tail)
