"""The planted-bug corpus as real Triton kernels on a GPU, through the equivalence and
determinism checks with device "cuda": each bug is caught by the finding kind that names
it over five seeds, and each correct twin passes. Also the two exploits that need a GPU:
a result finished later on a side stream, and a kernel that returns whatever memory the
allocator hands back (in a reference-first harness, the reference's freed result)."""
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

ROOT = Path(__file__).parent / "corpus_triton"
SEEDS = range(5)

PAIRS = [  # bug, twin, the finding kinds that must name the bug
    ("tt_rowsum_bf16_acc", "tt_rowsum_fp32_acc", {"error-growth"}),
    ("tt_embedding_store", "tt_embedding_atomic", {"mismatch"}),
    ("tt_layernorm_padded_variance", "tt_layernorm_masked_variance", {"mismatch"}),
    ("tt_rmsnorm_packed_rows", "tt_rmsnorm_row_stride", {"mismatch|nan"}),  # other rows' data, or the guard band's NaN
    ("tt_bias_skips_tail", "tt_bias_masks_tail", {"nan"}),
    ("tt_gelu_cached", "tt_gelu", {"cached-output"}),
    ("tt_gelu_writes_input", "tt_gelu", {"input-modified"}),
    ("tt_gelu_zeros", "tt_gelu", {"constant-output"}),
    ("tt_softmax_nan_rows", "tt_softmax_guarded", {"nan"}),
    ("tt_cross_entropy_bf16_true_class", "tt_cross_entropy_fp32_true_class", {"mismatch"}),
]


@pytest.fixture(autouse=True)
def compiled(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    import torch

    if not torch.cuda.is_available():
        pytest.skip("no CUDA GPU on this machine")
    monkeypatch.delenv("TRITON_INTERPRET", raising=False)
    sys.modules.pop("tt_kernels", None)
    yield
    sys.modules.pop("tt_kernels", None)


run = functools.partial(run_corpus, ROOT)


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize(("bug", "twin", "kinds"), PAIRS, ids=[p[0] for p in PAIRS])
def test_triton_bug_is_caught_on_the_gpu(bug: str, twin: str, kinds: set[str], seed: int, tmp_path: Path) -> None:
    r = run(bug, tmp_path, seed)
    missing = [k for k in kinds if not set(k.split("|")) & errors(r)]  # "a|b": either
    assert r.status is Status.FAILED and not missing, [f.message for f in r.findings]


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("twin", sorted({p[1] for p in PAIRS}))
def test_triton_twin_passes_on_the_gpu(twin: str, seed: int, tmp_path: Path) -> None:
    r = run(twin, tmp_path, seed)
    bad = not_notes(r)
    assert r.status is Status.PASSED and not bad, "\n".join(bad)
    assert "bfloat16" in str(r.extra.coverage) or "float32" in str(r.extra.coverage)


@pytest.mark.parametrize("seed", SEEDS)
def test_a_result_finished_later_on_a_side_stream_is_caught(seed: int, tmp_path: Path) -> None:
    """The candidate has no sleep of its own: gpu-gate's delay on the streams it switches to
    is what makes the missing wait visible, every time."""
    r = run("tt_gelu_side_stream", tmp_path, seed, cases=4)
    assert "unordered-stream" in errors(r), [f.message for f in r.findings]


@pytest.mark.parametrize("seed", SEEDS)
def test_a_side_stream_the_caller_waits_for_passes(seed: int, tmp_path: Path) -> None:
    r = run("tt_gelu_side_stream_ordered", tmp_path, seed, cases=8)
    bad = not_notes(r)
    assert r.status is Status.PASSED and not bad, "\n".join(bad)


@pytest.mark.parametrize("seed", SEEDS)
def test_returning_the_allocator_s_freed_memory_is_caught(seed: int, tmp_path: Path) -> None:
    r = run("tt_gelu_freed_buffer", tmp_path, seed, cases=8)
    assert r.status is Status.FAILED
    assert errors(r) & {"mismatch", "nan", "constant-output", "unstable"}, [f.message for f in r.findings]


def test_fp32_atomics_pass_determinism_within_tolerance_but_not_bitwise(tmp_path: Path) -> None:
    loose = run("tt_scatter_atomic", tmp_path, 0, check="determinism", repeats=8, concurrent_load=True)
    assert loose.status is Status.PASSED, [f.message for f in loose.findings]
    strict = run("tt_scatter_atomic_declared_deterministic", tmp_path, 0, check="determinism", repeats=8,
                 concurrent_load=True)
    assert strict.status is Status.FAILED and errors(strict) == {"nondeterministic"}
    assert "deterministic=True" in strict.findings[0].message



def test_the_cases_kernels_are_compiled_ahead_beside_the_worker(tmp_path: Path) -> None:
    """The head's worker starts a sibling that compiles the schedule's specializations on several
    threads (gpu_gate.worker.ahead); the job's verdict is the same, and its timing says so. (A job
    this small may end before the sibling has imported torch: the worker then ends it.)"""
    r = run("tt_gelu", tmp_path, 0)
    assert r.status is Status.PASSED, [f.message for f in r.findings]
    said = r.extra.timing["ahead"]
    assert said["head"] == "started" and "head_finished" in said, said


def test_the_launches_compiled_beside_the_cases_report_what_the_worker_would(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The head's sibling also compiles the launched specializations for the compile check's archs
    (gpu_gate.worker.ahead); the worker's finish takes them. Each reported row is what compiling
    that launch here gives."""
    from gpu_gate.worker import tritonc
    from gpu_gate.protocol.archs import arch_number

    r = run("tt_gelu", tmp_path, 0, cases=64, compile={"archs": ["sm_80", "sm_90"]})
    assert r.status is Status.PASSED, [f.message for f in r.findings]
    said = r.extra.timing["ahead"]
    print("ahead:", said)
    if said.get("head_finished"):  # it ran to its end, so through the build (a small job may end first)
        assert said.get("head_launched_built", 0) >= 2, said
    rows = r.extra.launch_resources
    assert {x["arch"] for x in rows} == {"sm_80", "sm_90"}, rows
    options = {(s["function"], repr(sorted(s["constexprs"].items())), repr(sorted(s["signature"].items()))):
               s["options"] for s in r.extra.specializations}
    monkeypatch.syspath_prepend(str(ROOT))
    import tt_kernels

    for x in rows:
        fn = getattr(tt_kernels, x["kernel"])
        opts = options[(x["kernel"], repr(sorted(x["constexprs"].items())), repr(sorted(x["signature"].items())))]
        built = tritonc.compile_kernel(fn, tritonc.launched_config(fn, x["constexprs"], x["signature"], opts),
                                       arch_number(x["arch"]))
        mine = {(k.registers, k.spill_store, k.shared_bytes) for k in built.resources}
        assert (x["registers"], x["spill_store"], x["shared_bytes"]) in mine, (x, mine)


def test_dry_runs_compile_every_cases_kernels(tmp_path: Path) -> None:
    """The sibling's dry runs: every case of a schedule called with Triton's launches turned into
    compiles, on four threads; none fails, and each case sent its kernel to compile."""
    from gpu_gate.protocol.cases import ScheduleOptions, schedule
    from gpu_gate.protocol.jobs import Job, SpecRef
    from gpu_gate.worker import ahead
    from gpu_gate.worker.loader import load_spec

    job = Job(id="equivalence:tt_gelu", check="equivalence", level="required", kernels=(),
              spec=SpecRef("gates.py", "tt_gelu"), seed=0)
    spec = load_spec(job, ROOT, tmp_path)
    cases = schedule(spec, ScheduleOptions.from_options({"cases": 16}, seed=0, budget=64 << 20))
    stats = ahead.dry_runs(spec, [c.token() for c in cases], threads=4)
    assert stats["cases"] == len(cases) and stats["failed"] == 0, stats
    assert stats["compiled"] >= len(cases), stats
