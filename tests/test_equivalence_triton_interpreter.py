"""The GPU corpus's Triton kernels, run here under TRITON_INTERPRET=1 in float32: the same
bugs are caught by the same finding kinds and the twins pass. This also shakes out errors
in the kernels before they meet a GPU (tests/gpu/test_equivalence_gpu.py)."""
from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from gpu_gate.findings import JobResult, Severity, Status
from gpu_gate.harness import Context, run_job
from gpu_gate.jobs import Job, SpecRef

ROOT = Path(__file__).parent / "gpu" / "corpus_triton"

PAIRS = [  # bug, twin, the finding kinds that must name the bug
    ("tt_rowsum_bf16_acc", "tt_rowsum_fp32_acc", {"error-growth"}),
    ("tt_embedding_store", "tt_embedding_atomic", {"mismatch"}),
    ("tt_layernorm_padded_variance", "tt_layernorm_masked_variance", {"mismatch"}),
    ("tt_rmsnorm_packed_rows", "tt_rmsnorm_row_stride", {"mismatch"}),
    ("tt_bias_skips_tail", "tt_bias_masks_tail", {"nan"}),
    ("tt_gelu_cached", "tt_gelu", {"cached-output"}),
    ("tt_gelu_writes_input", "tt_gelu", {"input-modified"}),
    ("tt_gelu_zeros", "tt_gelu", {"constant-output"}),
    ("tt_softmax_nan_rows", "tt_softmax_guarded", {"nan"}),
    ("tt_cross_entropy_bf16_true_class", "tt_cross_entropy_fp32_true_class", {"mismatch"}),
]


@pytest.fixture
def interpreter(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    sys.modules.pop("tt_kernels", None)  # @triton.jit reads TRITON_INTERPRET when the module is imported
    yield
    sys.modules.pop("tt_kernels", None)


def run(name: str, tmp_path: Path, seed: int = 1) -> JobResult:
    job = Job(id=f"equivalence:{name}", check="equivalence", level="required", kernels=(),
              spec=SpecRef("gates.py", name), seed=seed,
              options={"cases": 10, "shrink": False, "max_reduction": 1 << 14, "max_case_bytes": 8 << 20})
    return run_job(job, Context(repo_root=ROOT, device="cpu", workdir=tmp_path))


@pytest.mark.parametrize(("bug", "twin", "kinds"), PAIRS, ids=[p[0] for p in PAIRS])
def test_triton_bug_caught_and_twin_passes_in_the_interpreter(interpreter: None, bug: str, twin: str,
                                                              kinds: set[str], tmp_path: Path) -> None:
    r = run(bug, tmp_path)
    found = {f.kind for f in r.findings if f.severity is Severity.ERROR}
    assert r.status is Status.FAILED and kinds <= found, [f.message for f in r.findings]
    t = run(twin, tmp_path)
    bad = [f"{f.kind}: {f.message}" for f in t.findings if f.severity is not Severity.NOTE]
    assert t.status is Status.PASSED and not bad, "\n".join(bad)


def test_cuda_only_exploits_are_not_run_on_the_cpu(interpreter: None, tmp_path: Path) -> None:
    r = run("tt_gelu_side_stream", tmp_path)
    assert r.status is Status.NOT_RUN and "runs only on cuda" in (r.reason or "")
