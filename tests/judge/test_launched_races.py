"""Races read from the PTX of the Triton specializations the cases launched, without a GPU.

Real Triton kernels take their constexprs at the call site (``BLOCK=triton.next_power_of_2(n)``),
so the compile check, reading a kernel file alone, cannot build them ("no values known") and its
lock/flag and scatter checks stay silent. The equivalence job's cases launch them: under the
Triton interpreter the worker records each launch with its constexprs, a child process compiles
them for sm_90, and the judge reads that PTX as the compile check reads its own builds.

What the CPU can show: Triton 3.9 (the CPU wheel) puts a ``bar.sync`` before a scalar atomic
release by itself (FACTS.md), so its build of the spin lock released without a barrier is
race-free, and no finding is right for it; the same PTX without that barrier, as Triton 3.6 emits
it, is flagged. A ready flag raised with a plain store gets no such barrier from 3.9, and is
flagged here end to end. The lock as Triton 3.6 builds it is checked on a GPU
(tests/gpu/test_inputs_gpu.py). Triton decides at import time whether kernels are interpreted, so
what runs under TRITON_INTERPRET=1 runs in a subprocess."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

pytest.importorskip("triton")

from gpu_gate.findings import Severity  # noqa: E402
from gpu_gate.judge.checks import compile_launched  # noqa: E402

ROOT = Path(__file__).parent.parent / "corpus_races"
LOCK = "lock-release-without-barrier"


def _equivalence(name: str, tmp_path: Path) -> dict:  # type: ignore[type-arg]
    code = """
        import json, sys
        from pathlib import Path
        from gpu_gate.inprocess import Context
        from gpu_gate.judge.job import run_job
        from gpu_gate.protocol.jobs import Job, SpecRef
        root, name, out = Path(sys.argv[1]), sys.argv[2], Path(sys.argv[3])
        job = Job(id="j", check="equivalence", level="required", kernels=(), spec=SpecRef("gates.py", name), seed=0,
                  options={"cases": 3, "shrink": False, "growth": False, "planned": False,
                           "compile": {"archs": ["sm_80", "sm_90"]}})
        out.write_text(json.dumps(run_job(job, Context(repo_root=root, device="cpu", workdir=out.parent)).to_json()))
        """
    env = {**os.environ, "TRITON_INTERPRET": "1"}
    out = tmp_path / "result.json"
    p = subprocess.run([sys.executable, "-c", textwrap.dedent(code), str(ROOT), name, str(out)], capture_output=True,
                       text=True, env=env, cwd=tmp_path, timeout=1200)
    assert p.returncode == 0, p.stderr
    return json.loads(out.read_text())


def _races(r: dict) -> list[dict]:  # type: ignore[type-arg]
    return [f for f in r["findings"] if f["kind"] in (LOCK, "global-scatter-without-atomics")]


def test_a_flag_raised_by_a_plain_store_in_a_launched_kernel_is_found_without_a_gpu(tmp_path: Path) -> None:
    r = _equivalence("split_rows_flag_store", tmp_path)
    assert r["extra"]["specializations"], "the interpreter recorded the launches"
    assert "split_rows_flag_store" in r["extra"]["launches_linted"], "their PTX was read"
    (f,) = _races(r)
    assert f["severity"] == "error" and f["file"] == "tt_launched.py" and f["line"] == 21, f
    assert "sets a flag that its programs poll" in f["message"] and "as the cases launched it: SPLITS=" in f["message"]
    assert r["status"] == "failed"


def test_the_twin_that_releases_its_flag_after_a_barrier_is_clean(tmp_path: Path) -> None:
    r = _equivalence("split_rows_flag_release", tmp_path)
    assert "split_rows_flag_release" in r["extra"]["launches_linted"]
    assert _races(r) == [] and r["status"] == "passed", [f["message"] for f in r["findings"]]


def test_the_compile_check_alone_cannot_build_kernels_whose_constexprs_the_call_site_picks(tmp_path: Path) -> None:
    from gpu_gate.inprocess import Context
    from gpu_gate.judge.job import run_job
    from gpu_gate.protocol.jobs import Job

    job = Job(id="compile:tt_launched.py", check="compile", level="required", kernels=("tt_launched.py",),
              options={"archs": ["sm_90"]})
    r = run_job(job, Context(repo_root=ROOT, device="cpu", workdir=tmp_path))
    assert not [f for f in r.findings if f.kind == LOCK]
    assert any("no values" in f.message for f in r.findings), [f.message for f in r.findings]


def test_a_launched_spin_lock_is_read_with_the_toolchain_in_use(tmp_path: Path) -> None:
    """The layer-norm dW spin lock of tt_locks.py, its GROUPS and BLOCK chosen at the call site
    (gates.py): the launched specialization's PTX is read. This Triton's own build decides: where
    it put a barrier before the release (Triton 3.9), nothing is found, rightly; the same PTX
    without it (what Triton 3.6 emits) is flagged at the release, through the same judge."""
    import triton

    r = _equivalence("dw_lock_no_barrier", tmp_path)
    assert "partial_dw_no_barrier" in r["extra"]["launches_linted"]
    ptx = _launched_ptx(tmp_path)
    if "bar.sync" in ptx:
        assert _races(r) == [], f"triton {triton.__version__} put a barrier before the release"
        ptx = "\n".join(line for line in ptx.splitlines() if "bar.sync" not in line)
    else:
        assert [(f["kind"], f["line"]) for f in _races(r)] == [(LOCK, 22)]
    answer = {"ptx": [{"file": "tt_locks.py", "kernel": "partial_dw_no_barrier", "arch": "sm_90", "ptx": ptx,
                       "constexprs": {"GROUPS": 32, "BLOCK": 128}}], "root": str(ROOT)}
    findings, _ = compile_launched.judge(answer, {"level": "required"})
    hits = [f for f in findings if f.kind == LOCK]
    assert [(f.file, f.line, f.severity) for f in hits] == [("tt_locks.py", 22, Severity.ERROR)]
    assert "releases a lock" in hits[0].message and "as the cases launched it: GROUPS=32, BLOCK=128" in hits[0].message


def _launched_ptx(tmp_path: Path) -> str:
    """This Triton's sm_90 PTX of the lock kernel, launched as gates.py launches it (100 columns)."""
    code = """
        import json, sys, torch
        sys.path.insert(0, sys.argv[1])
        from gpu_gate.worker.specializations import compile_launched
        from gpu_gate.worker.tritonlaunch import describe
        import tt_locks as K
        x = torch.randn(4, 100)
        launch = describe(K.partial_dw_no_barrier, (x, x, torch.zeros(32, 100), torch.zeros(32, dtype=torch.int32),
                                                    100, 100), {"GROUPS": 32, "BLOCK": 128})
        print(json.dumps(compile_launched([("tt_locks.py", launch)], ["sm_90"])["ptx"][0]["ptx"]))
        """
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    p = subprocess.run([sys.executable, "-c", textwrap.dedent(code), str(ROOT)], capture_output=True, text=True,
                       env=env, cwd=tmp_path, timeout=600)
    assert p.returncode == 0, p.stderr
    return str(json.loads(p.stdout.strip().splitlines()[-1]))
