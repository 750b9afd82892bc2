from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from gpu_gate.cuda import nvcc
from gpu_gate.judge.checks import compile as compile_check
from gpu_gate.findings import Severity, Status
from gpu_gate.inprocess import Context
from gpu_gate.protocol.archs import arch_number, normalise_archs
from gpu_gate.protocol.jobs import Job

DATA = Path(__file__).parent.parent / "data" / "cuda"
needs_nvcc = pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc is not installed")


def in_process(repo: Path) -> Context:
    """The judge's context with the compile worker in this process, on ``repo``."""
    return Context(repo_root=repo, device="cpu", workdir=repo.parent)


@pytest.fixture()
def repo(tmp_path: Path) -> Path:
    root = tmp_path / "repo"
    shutil.copytree(DATA, root / "csrc")
    return root


def _job(*kernels: str, **options: object) -> Job:
    return Job(id="j1", check="compile", level="required", kernels=tuple(kernels), options=dict(options))


@needs_nvcc
@pytest.mark.slow
def test_good_kernel_compiles_for_both_default_archs_with_resources(repo: Path) -> None:
    out = compile_check.run(_job("csrc/good.cu"), in_process(repo))
    assert out.status is Status.PASSED, out.findings
    rows = out.extra.resources
    assert {(r["kernel"], r["arch"]) for r in rows} == {
        ("add_one", "sm_80"), ("add_one", "sm_90"), ("scale_tail", "sm_80"), ("scale_tail", "sm_90")}
    scale = next(r for r in rows if r["kernel"] == "scale_tail")
    assert scale["symbol"].startswith("_Z") and scale["registers"] > 0


@needs_nvcc
@pytest.mark.slow
def test_compile_error_points_at_file_and_line(repo: Path) -> None:
    out = compile_check.run(_job("csrc/broken.cu", archs=["sm_90"]), in_process(repo))
    assert out.status is Status.FAILED
    [finding] = out.findings
    assert (finding.kind, finding.file, finding.line) == ("compile-error", "csrc/broken.cu", 2)
    assert 'identifier "undefined_thing" is undefined' in finding.message
    assert finding.message.startswith("csrc/broken.cu:2:")


@needs_nvcc
@pytest.mark.slow
def test_header_is_compiled_through_a_generated_unit_and_blamed_itself(repo: Path) -> None:
    out = compile_check.run(_job("csrc/broken_header.cuh", archs=["90"]), in_process(repo))
    assert out.status is Status.FAILED
    assert [(f.file, f.line) for f in out.findings] == [("csrc/broken_header.cuh", 3)]
    ok = compile_check.run(_job("csrc/good_helpers.cuh", archs=["sm_90"]), in_process(repo))
    assert ok.status is Status.PASSED and ok.findings == []


@needs_nvcc
@pytest.mark.slow
def test_spills_are_reported_and_gated_by_level(repo: Path) -> None:
    opts = dict(archs=["sm_80"], nvcc_flags=["-maxrregcount=24"], max_spill_bytes=0, max_local_bytes=4096)
    advisory = compile_check.run(_job("csrc/spills.cu", **opts), in_process(repo))
    [row] = advisory.extra.resources
    assert row["kernel"] == "spilly" and row["spill_store"] > 0 and row["local_bytes"] >= 1024
    assert advisory.status is Status.PASSED
    assert [(f.kind, f.severity) for f in advisory.findings] == [("spills", Severity.WARNING)]
    required = compile_check.run(_job("csrc/spills.cu", resources_level="required", **opts), in_process(repo))
    assert required.status is Status.FAILED
    assert [(f.kind, f.severity) for f in required.findings] == [("spills", Severity.ERROR)]
    local = compile_check.run(_job("csrc/spills.cu", archs=["sm_90"], max_local_bytes=512), in_process(repo))
    assert [f.kind for f in local.findings] == ["local-memory"]


def test_missing_nvcc_fails_closed(repo: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(nvcc, "find_nvcc", lambda: None)
    out = compile_check.run(_job("csrc/good.cu"), in_process(repo))
    assert out.status is Status.ERROR
    assert [f.kind for f in out.findings] == ["tool-missing"]
    assert "nvcc not found" in out.findings[0].message


def test_arch_spellings_are_normalised() -> None:
    assert normalise_archs([90, "80", "sm_90a", "compute_86"]) == ["sm_90", "sm_80", "sm_90a", "sm_86"]
    assert arch_number("sm_90a") == 90


def test_find_nvcc_prefers_cuda_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    fake = tmp_path / "cuda" / "bin" / "nvcc"
    fake.parent.mkdir(parents=True)
    fake.write_text("#!/bin/sh\nexit 0\n")
    fake.chmod(0o755)
    monkeypatch.setenv("CUDA_HOME", str(tmp_path / "cuda"))
    assert nvcc.find_nvcc() == str(fake)
