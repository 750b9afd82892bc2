"""``gpu-gate doctor`` against a real GPU, NVML and CUDA stack."""
from __future__ import annotations

import json

import pytest

from gpu_gate.commands.doctor import doctor_main, infrastructure_findings, run_doctor

pytestmark = pytest.mark.gpu

OTHER_PROCESS = "another process holds GPU memory"


@pytest.fixture(autouse=True)
def _needs_gpu() -> None:
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("no CUDA GPU available")


def test_doctor_reads_a_healthy_hopper_gpu() -> None:
    report = run_doctor()
    assert report.has_gpu
    assert report.driver_version and report.cuda_driver_version
    g = report.gpus[0]
    assert "H100" in g.name or "H200" in g.name, g.name
    assert g.memory_total_mib and g.memory_free_mib and 0 < g.memory_free_mib <= g.memory_total_mib
    assert g.temperature_c is not None and 0 < g.temperature_c < 100
    # Hopper repairs memory by row remapping, so those counters must be readable.
    assert g.row_remap["pending"] is False and g.row_remap["failure"] is False
    assert g.ecc_uncorrected["volatile"] == 0
    unexpected = [p for p in report.problems if OTHER_PROCESS not in p]
    assert unexpected == [], report.problems


def test_cuda_works_through_torch_and_cupy() -> None:
    tools = run_doctor().tools
    assert tools["torch"].cuda_works is True, tools["torch"].detail
    assert tools["cupy"].cuda_works is True, tools["cupy"].detail
    assert tools["torch"].detail and "CUDA works on NVIDIA" in tools["torch"].detail
    assert tools["compute-sanitizer"].found, tools["compute-sanitizer"].detail


def test_doctor_main_json_and_findings(capsys: pytest.CaptureFixture[str]) -> None:
    rc = doctor_main(True)
    data = json.loads(capsys.readouterr().out)
    assert data["has_gpu"] is True
    only_others = all(OTHER_PROCESS in p for p in data["problems"])
    assert only_others, data["problems"]
    assert rc == (0 if not data["problems"] else 1)
    findings = infrastructure_findings(run_doctor())
    assert all(f.kind == "infrastructure" and OTHER_PROCESS in f.message for f in findings)


def test_a_gpu_named_by_uuid_is_the_one_examined_and_probed() -> None:
    """CUDA_VISIBLE_DEVICES may name a GPU by its UUID (as `nvidia-smi -L` prints it): the doctor
    examines that GPU, and its CUDA probes run on it."""
    from gpu_gate.commands.doctor import judge_runner

    everyone = run_doctor()
    first = everyone.gpus[0]
    assert first.uuid and first.uuid.startswith("GPU-")
    report = run_doctor(visible=[first.uuid])
    assert [(g.index, g.cuda_id) for g in report.gpus] == [(first.index, first.uuid)]
    assert report.tools["torch"].cuda_works is True, report.tools["torch"].detail
    verdict = judge_runner(report)
    assert verdict.usable == ([first.uuid] if report.healthy else []), report.problems
    missing = run_doctor(visible=["GPU-00000000-0000-0000-0000-000000000000"])
    assert missing.gpus == [] and any("CUDA_VISIBLE_DEVICES names" in p for p in missing.problems)
