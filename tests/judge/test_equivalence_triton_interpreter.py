"""The GPU corpus's Triton kernels, run here under TRITON_INTERPRET=1 in float32: the same
bugs are caught by the same finding kinds and the twins pass. This also shakes out errors
in the kernels before they meet a GPU (tests/gpu/test_equivalence_gpu.py).

Triton decides at import time whether its own library functions are interpreted, so the
jobs run in one subprocess that imports Triton with TRITON_INTERPRET=1 set."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from gpu_gate.findings import JobResult, Severity, Status

ROOT = Path(__file__).parent.parent / "gpu" / "corpus_triton"

PAIRS = [  # bug, twin, the finding kinds that must name the bug ("a|b": either)
    # in float32 data a bfloat16 running sum is wrong at every length (about 1000 times torch's error
    # from 256 terms on): a mismatch on the first cases, where the GPU's bfloat16 data shows it as growth
    ("tt_rowsum_bf16_acc", "tt_rowsum_fp32_acc", {"error-growth|mismatch"}),
    ("tt_embedding_store", "tt_embedding_atomic", {"mismatch"}),
    ("tt_layernorm_padded_variance", "tt_layernorm_masked_variance", {"mismatch"}),
    # rows read at the packed offset: other rows' data (mismatch) or, past the storage, the guard band (NaN)
    ("tt_rmsnorm_packed_rows", "tt_rmsnorm_row_stride", {"mismatch|nan"}),
    ("tt_bias_skips_tail", "tt_bias_masks_tail", {"nan"}),
    ("tt_gelu_cached", "tt_gelu", {"cached-output"}),
    ("tt_gelu_writes_input", "tt_gelu", {"input-modified"}),
    ("tt_gelu_zeros", "tt_gelu", {"constant-output"}),
    ("tt_softmax_nan_rows", "tt_softmax_guarded", {"nan"}),
    ("tt_cross_entropy_bf16_true_class", "tt_cross_entropy_fp32_true_class", {"mismatch"}),
]

DRIVER = """
import json, sys
from pathlib import Path
from gpu_gate.inprocess import Context
from gpu_gate.judge.job import run_job
from gpu_gate.protocol.jobs import Job, SpecRef

root, out = Path(sys.argv[1]), Path(sys.argv[2])
results = {}
for name in sys.argv[3:]:
    job = Job(id=name, check="equivalence", level="required", kernels=(), spec=SpecRef("gates.py", name), seed=1,
              options={"cases": 10, "shrink": False, "max_reduction": 1 << 14, "max_case_bytes": 8 << 20})
    results[name] = run_job(job, Context(repo_root=root, device="cpu", workdir=out.parent)).to_json()
out.write_text(json.dumps(results))
"""


@pytest.fixture(scope="module")
def interpreted(tmp_path_factory: pytest.TempPathFactory) -> dict[str, JobResult]:
    out = tmp_path_factory.mktemp("interp") / "results.json"
    names = sorted({p[0] for p in PAIRS} | {p[1] for p in PAIRS} | {"tt_gelu_side_stream"})
    env = {**os.environ, "TRITON_INTERPRET": "1"}
    p = subprocess.run([sys.executable, "-c", DRIVER, str(ROOT), str(out), *names], env=env, capture_output=True,
                       text=True, timeout=600, check=False)
    assert p.returncode == 0, p.stderr[-4000:]
    return {k: JobResult.from_json(v) for k, v in json.loads(out.read_text()).items()}


@pytest.mark.parametrize(("bug", "twin", "kinds"), PAIRS, ids=[p[0] for p in PAIRS])
def test_triton_bug_caught_and_twin_passes_in_the_interpreter(interpreted: dict[str, JobResult], bug: str,
                                                              twin: str, kinds: set[str]) -> None:
    r = interpreted[bug]
    found = {f.kind for f in r.findings if f.severity is Severity.ERROR}
    missing = [k for k in kinds if not set(k.split("|")) & found]
    assert r.status is Status.FAILED and not missing, [f.message for f in r.findings]
    t = interpreted[twin]
    bad = [f"{f.kind}: {f.message}" for f in t.findings if f.severity is not Severity.NOTE]
    assert t.status is Status.PASSED and not bad, "\n".join(bad)
    assert t.cases >= 10
    float_dtypes = {d for i in t.extra.coverage["inputs"].values() if i["kind"] == "tensor" for d in i["dtype"]}
    assert float_dtypes == {"float32"}, "the interpreter runs float32 only"


def test_cuda_only_exploits_are_not_run_on_the_cpu(interpreted: dict[str, JobResult]) -> None:
    r = interpreted["tt_gelu_side_stream"]
    assert r.status is Status.NOT_RUN and "runs only on cuda" in (r.reason or "")
