"""The inputs real bugs need, on a GPU, over five seeds: the planted bugs of the CPU corpus that the
gate finds without the spec's help (an undeclared label coupling, a wrapper threshold on two dims,
an overflow only a large offset reaches, within 8 cases; tests/corpus), each with its twin, with
device "cuda"; the weak accumulation that only the base's growth curve shows, through the executor
on a GPU; and the spin lock released without a barrier, its constexprs chosen at the call site,
read from the PTX the GPU's own Triton compiled for the cases' launches; and the determinism
check's contention cases surviving another gate that takes most of the GPU's memory."""
from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

from gpu_gate.findings import JobResult, Severity, Status
from gpu_gate.inprocess import Context
from gpu_gate.judge.job import run_job
from gpu_gate.protocol.jobs import Job, SpecRef

pytestmark = pytest.mark.gpu

TESTS = Path(__file__).parent.parent
CORPUS = TESTS / "corpus"
RACES = TESTS / "corpus_races"
SEEDS = range(5)
GPU = os.environ.get("GG_TEST_GPU", "0")  # the GPU the executor's jobs run on (as CUDA_VISIBLE_DEVICES names it)

PLANTED = [  # file, bug, twin, the finding kinds that must name the bug ("a|b": either), cases
    ("cross_entropy_undeclared.py", "cross_entropy_undeclared_bf16_true_class",
     "cross_entropy_undeclared_fp32_true_class", {"mismatch"}, 24),
    ("thresholds.py", "dweight_split_path_bf16", "dweight_split_path_fp32", {"mismatch"}, 24),
    ("softmax_offset.py", "softmax_no_max_subtraction", "softmax_max_subtracted", {"nan"}, 8),
]


def _corpus(file: str, name: str, seed: int, cases: int, tmp_path: Path) -> JobResult:
    job = Job(id=f"equivalence:{file}::{name}", check="equivalence", level="required", kernels=(),
              spec=SpecRef(file, name), options={"cases": cases, "shrink": False}, seed=seed)
    return run_job(job, Context(repo_root=CORPUS, device="cuda", workdir=tmp_path))


def _errors(r: JobResult) -> set[str]:
    return {f.kind for f in r.findings if f.severity is Severity.ERROR}


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize(("file", "bug", "twin", "kinds", "cases"), PLANTED, ids=[p[1] for p in PLANTED])
def test_the_bug_is_caught_and_the_twin_passes_on_the_gpu(file: str, bug: str, twin: str, kinds: set[str],
                                                          cases: int, seed: int, tmp_path: Path) -> None:
    r = _corpus(file, bug, seed, cases, tmp_path / "bug")
    missing = [k for k in kinds if not set(k.split("|")) & _errors(r)]
    assert r.status is Status.FAILED and not missing, [f.message for f in r.findings]
    ok = _corpus(file, twin, seed, cases, tmp_path / "twin")
    bad = [f"{f.kind}: {f.message}" for f in ok.findings if f.severity is not Severity.NOTE]
    assert ok.status is Status.PASSED and not bad, "\n".join(bad)


@pytest.mark.parametrize("seed", SEEDS)
def test_a_weak_accumulation_is_new_error_growth_against_the_base_on_the_gpu(seed: int, tmp_path: Path) -> None:
    sys.path.insert(0, str(TESTS / "judge"))
    import test_growth_against_base as g

    # the lengths the CPU reaches (2^16): beyond them the planted running total is no longer weak
    r = g.run_pr(tmp_path / "bug", g.BASE, g.WEAK, seed, gpus=(GPU,), max_reduction=1 << 16)
    errors = [(f.kind, f.details.get("against")) for f in r.findings if f.severity is Severity.ERROR]
    # a case of the main schedule may catch it too (less-accurate than the base), never anything else
    assert ("error-growth", "base") in errors and {k for k, _ in errors} <= {"error-growth", "less-accurate"}, \
        r.findings
    twin = g.run_pr(tmp_path / "twin", g.BASE, g.TWIN, seed, gpus=(GPU,), max_reduction=1 << 16)
    assert twin.status is Status.PASSED, [f.message for f in twin.findings]


@pytest.mark.parametrize("seed", SEEDS)
def test_a_launched_spin_lock_without_a_barrier_is_read_from_the_gpus_own_build(
        seed: int, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """gates.py launches the layer-norm dW spin lock with GROUPS and BLOCK chosen at the call site.
    The equivalence job compiles what its cases launched with this machine's Triton and reads the
    PTX: Triton 3.6 (no barrier of its own before the release) is flagged at the release; the twin
    with tl.debug_barrier() is clean. A Triton that adds the barrier itself is clean too, rightly."""
    import triton

    monkeypatch.syspath_prepend(str(RACES))
    monkeypatch.delenv("TRITON_INTERPRET", raising=False)
    results = {}
    for name in ("dw_lock_no_barrier", "dw_lock_barrier"):
        job = Job(id=name, check="equivalence", level="required", kernels=(), spec=SpecRef("gates.py", name),
                  seed=seed, options={"cases": 4, "shrink": False, "growth": False,
                                      "compile": {"archs": ["sm_90"]}})
        results[name] = run_job(job, Context(repo_root=RACES, device="cuda", workdir=tmp_path / name))
    for name, r in results.items():
        kernel = "partial_dw_barrier" if name == "dw_lock_barrier" else "partial_dw_no_barrier"
        assert kernel in r.extra.launches_linted, (name, r.extra.launches_linted)
    locks = [f for f in results["dw_lock_no_barrier"].findings if f.kind == "lock-release-without-barrier"]
    if triton.__version__.startswith(("3.6", "3.5", "3.4")):
        assert [(f.file, f.line, f.severity) for f in locks] == [("tt_locks.py", 22, Severity.ERROR)], locks
        assert "as the cases launched it: GROUPS=32" in locks[0].message
    else:
        print(f"triton {triton.__version__}: {len(locks)} lock finding(s) (3.9 puts its own barrier there)")
    assert not [f for f in results["dw_lock_barrier"].findings if f.kind == "lock-release-without-barrier"]


@pytest.mark.parametrize("seed", range(2))
def test_contention_cases_survive_another_gate_taking_the_gpus_memory(seed: int, tmp_path: Path,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    """Another gate takes most of the GPU's memory after this job sized its contention cases (4 GiB
    each, as on a free GPU): a case that no longer fits is run again smaller (an ``out-of-memory``
    note), the scatter race is still named ``nondeterministic``, its atomic twin passes, and
    neither job is an error. Prints the notes (-s)."""
    import torch

    from gpu_gate.judge.checks import determinism

    monkeypatch.syspath_prepend(str(RACES))
    monkeypatch.setattr(determinism.Determinism, "_contention_budget", lambda self: 4 << 30)
    free, _ = torch.cuda.mem_get_info()
    other_gate = torch.empty(max(0, free - (1 << 30)), dtype=torch.uint8, device="cuda")  # 1 GiB left
    try:
        results = {}
        for name in ("embedding_grad_store", "embedding_grad_atomic"):
            job = Job(id=name, check="determinism", level="required", kernels=(), spec=SpecRef("gates.py", name),
                      seed=seed, options={"repeats": 8, "concurrent_load": True, "contention": True})
            results[name] = run_job(job, Context(repo_root=RACES, device="cuda", workdir=tmp_path / name))
    finally:
        del other_gate
        torch.cuda.empty_cache()
    for name, r in results.items():
        print(f"\n{name} seed {seed}: {r.status.value}; "
              f"{[f.message[:200] for f in r.findings if f.kind == 'out-of-memory']}")
        assert r.status is not Status.ERROR and not [f for f in r.findings if f.kind == "reference-error"], r.findings
    assert {f.kind for f in results["embedding_grad_store"].findings if f.severity is Severity.ERROR} == \
        {"nondeterministic"}, results["embedding_grad_store"].findings
    assert results["embedding_grad_atomic"].status is Status.PASSED, \
        [f.message for f in results["embedding_grad_atomic"].findings]
