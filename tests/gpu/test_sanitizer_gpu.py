"""compute-sanitizer on planted bugs, each with a clean twin that must pass.

The kernels live in ``kernels/``; ``kernels/run_case.py`` launches one case
through ``gpu_gate.cuda.load`` or Triton. Set ``GPU_GATE_FIXTURE_OUT=<dir>`` to
keep every XML file the tool writes (genuine fixtures for the parser tests).
"""
from __future__ import annotations

import dataclasses
import os
import shutil
import sys
from pathlib import Path

import pytest

from gpu_gate import proc
from gpu_gate.judge.checks import sanitizer as check
from gpu_gate.cuda import sanitizer as cs
from gpu_gate.findings import Finding, Severity, Status
from gpu_gate.protocol.jobs import Job

pytestmark = pytest.mark.gpu

KERNELS = Path(__file__).parent / "kernels"
REPO = Path(__file__).resolve().parents[2]


def _gpu() -> bool:
    try:
        import torch
    except ImportError:
        return False
    return bool(torch.cuda.is_available())


SANITIZER = cs.locate(os.environ.get("GPU_GATE_SANITIZER_PATH")) if _gpu() else None
if not _gpu():
    pytest.skip("no CUDA device", allow_module_level=True)
if SANITIZER is None:
    pytest.skip("compute-sanitizer not found", allow_module_level=True)


@dataclasses.dataclass
class Inner:
    status: Status
    findings: list[Finding] = dataclasses.field(default_factory=list)
    cases: int = 1
    reason: str | None = None
    extra: dict[str, object] = dataclasses.field(default_factory=dict)


def _bug_lines(file: str, kernel: str) -> set[int]:
    lines = (KERNELS / file).read_text().splitlines()
    return {i for i, text in enumerate(lines, 1) if f"BUG: {kernel}" in text}


@dataclasses.dataclass
class Ctx:
    repo_root: Path
    has_gpu: bool = True
    sanitizer_path: str | None = SANITIZER.path


def sanitize(tmp_path: Path, tool: str, case: str, kernel: str, *, pool: bool = False,
             timeout: float = 240) -> tuple[proc.ProcResult, object]:
    """Run one case the way the executor does: ``wrap``, run, ``collect``."""
    job = Job(id=case, check=tool, level="required", kernels=(), options={"kernel_names": [kernel],
                                                                             "launch_timeout": 120})
    inner_argv = [sys.executable, str(KERNELS / "run_case.py"), case, *(["--pool"] if pool else [])]
    workdir = tmp_path / "w"
    tool_argv = check.wrap(job, workdir, Ctx(REPO))
    assert isinstance(tool_argv, list), tool_argv
    argv = [*tool_argv, *inner_argv]
    if pool:  # keep torch's caching allocator on: the configuration that hides overruns
        argv.remove("PYTORCH_NO_CUDA_MEMORY_CACHING=1")
    env = proc.scrubbed_env(extra={"PYTHONPATH": f"{REPO}{os.pathsep}{os.environ.get('PYTHONPATH', '')}",
                                   "GPU_GATE_REPO_ROOT": str(REPO)})
    env.pop("PYTORCH_NO_CUDA_MEMORY_CACHING", None)
    res = proc.run(argv, cwd=REPO, env=env, timeout=timeout)
    _keep_fixture(check.xml_file(workdir, tool), f"{tool}_{case}{'_pool' if pool else ''}")
    inner = Inner(Status.PASSED) if f"case {case} done" in res.stdout else None
    return res, check.collect(job, workdir, res, inner)


def _keep_fixture(xml: Path, name: str) -> None:
    out = os.environ.get("GPU_GATE_FIXTURE_OUT")
    if out and xml.is_file():
        Path(out).mkdir(parents=True, exist_ok=True)
        shutil.copy(xml, Path(out) / f"{name}_real.xml")


def _assert_found(outcome: object, kind: str, file: str, kernel: str) -> None:
    assert outcome.status is Status.FAILED, outcome.findings
    hits = [f for f in outcome.findings if f.kind == kind]
    assert hits, outcome.findings
    assert hits[0].details["kernel"].find(kernel) >= 0
    located = [f for f in hits if f.file == f"tests/gpu/kernels/{file}"]
    assert located and located[0].line in _bug_lines(file, kernel), hits


def _assert_clean(res: proc.ProcResult, outcome: object) -> None:
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
    assert outcome.status is Status.PASSED
    assert [f for f in outcome.findings if f.severity is not Severity.NOTE] == []


# --- memcheck: tail out of bounds ---------------------------------------------


def test_memcheck_finds_cuda_tail_overrun_with_pools_off(tmp_path: Path) -> None:
    res, out = sanitize(tmp_path, "memcheck", "cuda_tail_bug", "tail_oob")
    assert res.returncode == cs.ERROR_EXITCODE
    _assert_found(out, "invalid-global-read", "tail.cu", "tail_oob")


def test_memcheck_misses_cuda_tail_overrun_inside_cupys_pool(tmp_path: Path) -> None:
    """Why the pools are off: the overrun lands inside the pool's slab."""
    res, out = sanitize(tmp_path, "memcheck", "cuda_tail_bug", "tail_oob", pool=True)
    assert res.returncode == 0 and out.status is Status.PASSED


def test_memcheck_passes_cuda_tail_clean_twin(tmp_path: Path) -> None:
    _assert_clean(*sanitize(tmp_path, "memcheck", "cuda_tail_ok", "tail_ok"))


def test_memcheck_finds_triton_missing_tail_mask(tmp_path: Path) -> None:
    res, out = sanitize(tmp_path, "memcheck", "triton_tail_bug", "copy_nomask")
    assert res.returncode == cs.ERROR_EXITCODE
    _assert_found(out, "invalid-global-read", "triton_copy.py", "copy_nomask")


def test_memcheck_misses_triton_overrun_with_torch_caching_on(tmp_path: Path) -> None:
    res, out = sanitize(tmp_path, "memcheck", "triton_tail_bug", "copy_nomask", pool=True)
    assert res.returncode == 0 and out.status is Status.PASSED


def test_memcheck_passes_triton_clean_twin(tmp_path: Path) -> None:
    _assert_clean(*sanitize(tmp_path, "memcheck", "triton_tail_ok", "copy_masked"))


# --- racecheck, synccheck, initcheck -------------------------------------------


def test_racecheck_finds_missing_syncthreads(tmp_path: Path) -> None:
    res, out = sanitize(tmp_path, "racecheck", "smem_race", "smem_race")
    assert res.returncode == cs.ERROR_EXITCODE
    _assert_found(out, "race", "smem.cu", "smem_race")


def test_racecheck_passes_synchronised_twin(tmp_path: Path) -> None:
    _assert_clean(*sanitize(tmp_path, "racecheck", "smem_ok", "smem_ok"))


def test_synccheck_finds_divergent_barrier(tmp_path: Path) -> None:
    res, out = sanitize(tmp_path, "synccheck", "divergent_barrier", "divergent_barrier")
    assert res.returncode == cs.ERROR_EXITCODE
    _assert_found(out, "barrier-divergence", "barrier.cu", "divergent_barrier")


def test_synccheck_passes_uniform_barrier(tmp_path: Path) -> None:
    _assert_clean(*sanitize(tmp_path, "synccheck", "uniform_barrier", "uniform_barrier"))


def test_initcheck_finds_uninitialised_read(tmp_path: Path) -> None:
    res, out = sanitize(tmp_path, "initcheck", "uninit_bug", "read_input")
    assert res.returncode == cs.ERROR_EXITCODE
    _assert_found(out, "uninitialized-read", "uninit.cu", "read_input")


def test_initcheck_passes_initialised_twin(tmp_path: Path) -> None:
    _assert_clean(*sanitize(tmp_path, "initcheck", "uninit_ok", "read_input"))


# --- a hang ---------------------------------------------------------------------


def test_hanging_kernel_becomes_a_timeout_finding(tmp_path: Path) -> None:
    res, out = sanitize(tmp_path, "memcheck", "hang", "spin_forever", timeout=30)
    assert res.timed_out
    assert out.status is Status.ERROR and out.findings[0].kind == "timeout"
