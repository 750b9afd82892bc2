"""On a GPU, what a spec launched is recorded in its result, for compiled Triton kernels
(JITFunction) and gg.cuda kernels alike: the judge's coverage map is built from it."""
from __future__ import annotations

from pathlib import Path

import pytest

from gpu_gate.findings import Status
from gpu_gate.inprocess import Context
from gpu_gate.judge.job import run_job
from gpu_gate.protocol.jobs import Job, SpecRef

GPU = Path(__file__).parent


@pytest.mark.parametrize("corpus, spec, expected", [
    ("corpus_triton", "tt_rowsum_fp32_acc", ("tt_kernels.py", "rowsum_kernel", "triton")),
    ("corpus_cuda", "cu_rowsum_fp32_acc", ("rowsum.cu", "rowsum_fp32acc_", "cuda")),  # one kernel per dtype
])
def test_launches_are_recorded_on_the_gpu(corpus: str, spec: str, expected: tuple[str, str, str], tmp_path: Path,
                                          monkeypatch: pytest.MonkeyPatch) -> None:
    root = GPU / corpus
    monkeypatch.setenv("GPU_GATE_REPO_ROOT", str(root))
    job = Job(id=spec, check="equivalence", level="required", kernels=(), spec=SpecRef("gates.py", spec), seed=3,
              options={"cases": 4, "shrink": False, "growth": False})
    r = run_job(job, Context(repo_root=root, device="cuda", workdir=tmp_path))
    assert r.status is Status.PASSED, [f.message for f in r.findings]
    file, name, language = expected
    got = r.extra.launches["kernels"]
    assert any(k["file"] == file and k["name"].startswith(name) and k["language"] == language for k in got), got
    assert r.extra.launches["files"] == [file]
