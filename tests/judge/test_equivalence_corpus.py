"""The planted-bug corpus: every buggy candidate is caught, over three seeds, by the finding
kind that names its bug, and its correct twin passes (no false positives). Three, not five: the
suite runs on two CPU cores within CI's time, and the corpus is its largest part; set
GG_CORPUS_SEED0 to run the same tests on other seeds.

The candidates are plain torch emulations of real kernel bugs (tests/corpus/*.py); the
same bugs as Triton kernels are in tests/gpu/corpus_triton and run on a GPU."""
from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from gpu_gate.findings import JobResult, Severity, Status
from gpu_gate.inprocess import Context
from gpu_gate.judge.job import run_job
from gpu_gate.protocol.jobs import Job, SpecRef

CORPUS = Path(__file__).parent.parent / "corpus"
_SEED0 = int(__import__("os").environ.get("GG_CORPUS_SEED0", "0"))
SEEDS = range(_SEED0, _SEED0 + 3)


@dataclasses.dataclass(frozen=True)
class Planted:
    file: str
    bug: str
    twin: str
    caught_by: tuple[str, ...]  # every one of these kinds must be reported for the bug ("a|b": either)

    @property
    def id(self) -> str:
        return self.bug


PLANTED = [
    Planted("rowsum.py", "rowsum_bf16_acc", "rowsum_fp32_acc", ("error-growth",)),
    Planted("dweight.py", "dweight_bf16_acc", "dweight_fp32_sequential", ("mismatch",)),
    Planted("embedding.py", "embedding_scatter_store", "embedding_scatter_add", ("mismatch",)),
    Planted("layernorm.py", "layernorm_padded_variance", "layernorm_masked_variance", ("mismatch",)),
    # rows read at the packed offset: other rows' data (mismatch) or, past the storage, the guard band (NaN)
    Planted("rmsnorm_stride.py", "rmsnorm_packed_rows", "rmsnorm_row_stride", ("mismatch|nan",)),
    Planted("tail.py", "bias_skips_tail", "bias_masks_tail", ("nan",)),
    Planted("masked_operand.py", "weighted_sum_masks_one_operand", "weighted_sum_masks_both", ("nan",)),
    Planted("cheats.py", "gelu_cached", "gelu_honest", ("cached-output",)),
    Planted("cheats.py", "gelu_cached_copy", "gelu_honest", ("insensitive",)),
    Planted("cheats.py", "gelu_scratch_input", "gelu_honest", ("input-modified",)),
    Planted("cheats.py", "gelu_zeros", "gelu_honest", ("constant-output",)),
    Planted("cheats.py", "copy_returns_view", "copy_honest", ("output-aliases-input",)),
    Planted("cheats.py", "affine_reads_freed_reference", "affine_honest", ("nan", "unstable")),
    Planted("softmax.py", "softmax_nan_rows", "softmax_guarded", ("nan",)),
    Planted("cross_entropy.py", "cross_entropy_bf16_true_class", "cross_entropy_fp32_true_class", ("mismatch",)),
    Planted("cross_entropy_labels.py", "cross_entropy_labels_bf16_true_class", "cross_entropy_labels_fp32_true_class",
            ("mismatch",)),
    # the same bug with labels declared as most users will (no peak_of=): the coupling is inferred
    Planted("cross_entropy_undeclared.py", "cross_entropy_undeclared_bf16_true_class",
            "cross_entropy_undeclared_fp32_true_class", ("mismatch",)),
    # a dW path taken only past a threshold on two dims, read from the wrapper's source
    Planted("thresholds.py", "dweight_split_path_bf16", "dweight_split_path_fp32", ("mismatch",)),
    # exp(x) without max subtraction: NaN once values pass 88 (the offset distribution at mean 1000)
    Planted("softmax_offset.py", "softmax_no_max_subtraction", "softmax_max_subtracted", ("nan",)),
]


def run_spec(file: str, name: str, seed: int, tmp_path: Path, **options: object) -> JobResult:
    opts = {"cases": 24, "shrink": False, **options}
    job = Job(id=f"equivalence:{file}::{name}", check="equivalence", level="required", kernels=(),
              spec=SpecRef(file, name), options=opts, seed=seed)
    return run_job(job, Context(repo_root=CORPUS, device="cpu", workdir=tmp_path))


def _kinds(r: JobResult) -> set[str]:
    return {f.kind for f in r.findings if f.severity is Severity.ERROR}


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("p", PLANTED, ids=lambda p: p.id)
def test_bug_is_caught_by_the_right_finding(p: Planted, seed: int, tmp_path: Path) -> None:
    r = run_spec(p.file, p.bug, seed, tmp_path)
    assert r.status is Status.FAILED, [f.message for f in r.findings]
    missing = {k for k in p.caught_by if not set(k.split("|")) & _kinds(r)}
    assert not missing, f"{p.bug} seed {seed}: expected {missing} among {sorted(_kinds(r))}"
    for f in r.findings:
        if f.severity is Severity.ERROR and f.kind != "error-growth":
            assert f.repro and f.repro.startswith("gpu-gate repro ") and "--case " in f.repro


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("twin", sorted({(p.file, p.twin) for p in PLANTED}), ids=lambda t: t[1])
def test_correct_twin_passes(twin: tuple[str, str], seed: int, tmp_path: Path) -> None:
    r = run_spec(*twin, seed, tmp_path)
    bad = [f"{f.kind}: {f.message}" for f in r.findings if f.severity is not Severity.NOTE]
    assert r.status is Status.PASSED and not bad, "\n".join(bad)
    assert r.cases >= 24


def test_growth_curve_of_the_bf16_accumulator_is_reported_flagged(tmp_path: Path) -> None:
    r = run_spec("rowsum.py", "rowsum_bf16_acc", 0, tmp_path)
    g = r.extra.growth
    assert g["flagged"] and g["dim"] == "n" and g["dtype"] == "bfloat16"
    sizes = [row["size"] for row in g["rows"]]
    assert sizes[0] == 256 and sizes[-1] == 1 << 18
    first, last = g["rows"][0], g["rows"][-1]
    # more accurate than (or as accurate as) torch when short, far worse when long
    assert first["candidate"] <= 2 * first["baseline"]
    assert last["candidate"] > 50 * last["baseline"]
    assert g["slope_candidate"] - g["slope_baseline"] > 0.3


def test_without_labels_at_the_hot_logit_the_cross_entropy_bug_hides(tmp_path: Path) -> None:
    """Why couplings are inferred: the same spec, its labels drawn apart from the logits (the label
    is almost never the class with p close to 1), misses the bug on every seed."""
    for seed in SEEDS:
        r = run_spec("cross_entropy_undeclared.py", "cross_entropy_undeclared_bf16_true_class", seed, tmp_path,
                     infer_couplings=False)
        assert r.status is Status.PASSED, [f.message for f in r.findings]


@pytest.mark.parametrize("seed", SEEDS)
def test_the_inferred_coupling_is_named_in_the_failing_case(seed: int, tmp_path: Path) -> None:
    r = run_spec("cross_entropy_undeclared.py", "cross_entropy_undeclared_bf16_true_class", seed, tmp_path)
    f = next(f for f in r.findings if f.kind == "mismatch")
    assert "labels: int64" in f.details["case"] and "at the peak of logits (p=" in f.details["case"], f.details["case"]


def test_without_the_wrappers_thresholds_the_split_path_is_never_run(tmp_path: Path) -> None:
    """Why the wrapper is read: drawn one dim at a time, no case combines 100000 rows with at most
    4 channels, on any seed."""
    for seed in SEEDS:
        r = run_spec("thresholds.py", "dweight_split_path_bf16", seed, tmp_path, planned=False)
        assert r.status is Status.PASSED, [f.message for f in r.findings]


@pytest.mark.parametrize("seed", SEEDS)
def test_the_threshold_is_read_from_the_wrapper_and_run_on_both_sides(seed: int, tmp_path: Path) -> None:
    r = run_spec("thresholds.py", "dweight_split_path_bf16", seed, tmp_path)
    found = r.extra.thresholds["found"]
    assert [(t["where"], t["conditions"]) for t in found] == [
        ("wraplib/scale.py:30", ["rows >= 100000 and hidden <= 4"])]
    f = next(f for f in r.findings if f.kind == "mismatch")
    assert "inside wraplib/scale.py:30" in f.details["case"], f.details["case"]
    twin = run_spec("thresholds.py", "dweight_split_path_fp32", seed, tmp_path)
    sides = [c for c in twin.extra.coverage["planned"] if "wraplib/scale.py:30" in c]
    assert any(s.startswith("inside") for s in sides) and any("rows < 100000" in s for s in sides), sides


@pytest.mark.parametrize("seed", SEEDS)
def test_an_overflow_only_large_offsets_reach_is_caught_within_8_cases(seed: int, tmp_path: Path) -> None:
    r = run_spec("softmax_offset.py", "softmax_no_max_subtraction", seed, tmp_path, cases=8, growth=False)
    assert r.status is Status.FAILED and "nan" in _kinds(r), [f.message for f in r.findings]
    assert r.cases <= 8
    twin = run_spec("softmax_offset.py", "softmax_max_subtracted", seed, tmp_path, cases=8, growth=False)
    assert twin.status is Status.PASSED, [f.message for f in twin.findings]
