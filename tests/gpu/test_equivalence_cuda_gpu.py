"""The planted-bug corpus as raw CUDA kernels (tests/gpu/corpus_cuda: .cu files compiled with
NVRTC and launched through gg.cuda.load) through the equivalence check with device "cuda":
each bug is caught by the finding kind that names it over five seeds, and each correct twin
passes. The same bugs as Triton kernels are in test_equivalence_gpu.py; the CPU test
tests/judge/test_corpus_cuda_compiles.py compiles every kernel here without a GPU."""
from __future__ import annotations

import functools
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from corpus import errors, not_notes
from corpus import run as run_corpus

from gpu_gate.findings import Status

pytestmark = pytest.mark.gpu

ROOT = Path(__file__).parent / "corpus_cuda"
SEEDS = range(5)

PAIRS = [  # bug, twin, the finding kinds that must name the bug
    ("cu_rowsum_bf16_acc", "cu_rowsum_fp32_acc", {"error-growth"}),
    ("cu_embedding_store", "cu_embedding_atomic", {"mismatch"}),
    ("cu_layernorm_padded_variance", "cu_layernorm_masked_variance", {"mismatch"}),
    ("cu_rmsnorm_packed_rows", "cu_rmsnorm_row_stride", {"mismatch|nan"}),  # other rows' data, or the guard band's NaN
    ("cu_bias_skips_tail", "cu_bias_masks_tail", {"nan"}),
    ("cu_gelu_cached", "cu_gelu", {"cached-output"}),
    ("cu_gelu_writes_input", "cu_gelu", {"input-modified"}),
    ("cu_gelu_zeros", "cu_gelu", {"constant-output"}),
    ("cu_gelu_side_stream", "cu_gelu_side_stream_ordered", {"unordered-stream"}),
    ("cu_gelu_side_stream_cupy", "cu_gelu_side_stream_ordered", {"unordered-stream"}),
    ("cu_gelu_cupy_current_stream", "cu_gelu_side_stream_ordered", {"unordered-stream"}),
    ("cu_softmax_nan_rows", "cu_softmax_guarded", {"nan"}),
    ("cu_cross_entropy_bf16_true_class", "cu_cross_entropy_fp32_true_class", {"mismatch"}),
]


@pytest.fixture(autouse=True)
def cuda_corpus(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    import torch

    if not torch.cuda.is_available():
        pytest.skip("no CUDA GPU on this machine")
    # As the executor sets it for a job: NVRTC then names each program after its path in the
    # corpus (rowsum.cu), and the corpus's own directory is on NVRTC's include path.
    monkeypatch.setenv("GPU_GATE_REPO_ROOT", str(ROOT))
    sys.modules.pop("cu_kernels", None)
    yield
    sys.modules.pop("cu_kernels", None)


run = functools.partial(run_corpus, ROOT)


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize(("bug", "twin", "kinds"), PAIRS, ids=[p[0] for p in PAIRS])
def test_cuda_bug_is_caught_on_the_gpu(bug: str, twin: str, kinds: set[str], seed: int, tmp_path: Path) -> None:
    r = run(bug, tmp_path, seed)
    missing = [k for k in kinds if not set(k.split("|")) & errors(r)]  # "a|b": either
    assert r.status is Status.FAILED and not missing, [f.message for f in r.findings]


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("twin", sorted({p[1] for p in PAIRS}))
def test_cuda_twin_passes_on_the_gpu(twin: str, seed: int, tmp_path: Path) -> None:
    r = run(twin, tmp_path, seed)
    bad = not_notes(r)
    assert r.status is Status.PASSED and not bad, "\n".join(bad)
    assert "bfloat16" in str(r.extra.coverage) or "float32" in str(r.extra.coverage)
