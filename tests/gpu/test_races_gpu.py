"""Races that only contention shows, on a GPU, through the determinism check and its
contention cases: a spin-lock partial-dW reduction released without a barrier (and its twin
with tl.debug_barrier()), a global scatter without atomics (and its atomic twin). Over five
seeds; the number of repeated runs that differed is in the finding. Prints what the contention
cases cost (run with -s to see it)."""
from __future__ import annotations

import time
from pathlib import Path

import pytest

from gpu_gate.findings import Status
from gpu_gate.inprocess import Context
from gpu_gate.judge.job import run_job
from gpu_gate.protocol.jobs import Job, SpecRef

ROOT = Path(__file__).parent.parent / "corpus_races"


def determinism(name: str, seed: int, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, contention: bool = True):
    monkeypatch.syspath_prepend(str(ROOT))
    job = Job(id=name, check="determinism", level="required", kernels=(), spec=SpecRef("gates.py", name), seed=seed,
              options={"repeats": 8, "concurrent_load": True, "contention": contention})
    return run_job(job, Context(repo_root=ROOT, device="cuda", workdir=tmp_path))


@pytest.mark.parametrize("seed", range(5))
@pytest.mark.parametrize("bug, twin", [("dw_lock_no_barrier", "dw_lock_barrier"),
                                       ("embedding_grad_store", "embedding_grad_atomic")])
def test_contention_races_are_caught_and_twins_pass(bug: str, twin: str, seed: int, tmp_path: Path,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    import triton

    t = time.monotonic()
    r = determinism(bug, seed, tmp_path, monkeypatch)
    took = time.monotonic() - t
    print(f"\n{bug} seed {seed}: {r.status.value} in {took:.1f}s: {[f.message[:160] for f in r.findings]}")
    if bug == "dw_lock_no_barrier" and not triton.__version__.startswith(("3.6", "3.5", "3.4")):
        pytest.skip(f"triton {triton.__version__} puts a barrier before the release itself")
    assert r.status is Status.FAILED and {f.kind for f in r.findings} == {"nondeterministic"}, r.findings
    from gpu_gate.judge.checks.determinism import FEWER_SMS

    tally = r.findings[0].details["runs_differed"]
    print(f"{bug} seed {seed}: runs that differed: {tally}")
    assert FEWER_SMS in tally  # the repeats on fewer SMs ran
    t = time.monotonic()
    ok = determinism(twin, seed, tmp_path, monkeypatch)
    print(f"{twin} seed {seed}: {ok.status.value} in {time.monotonic() - t:.1f}s")
    assert ok.status is Status.PASSED, [f.message for f in ok.findings]


@pytest.mark.parametrize("name", ["dw_lock_barrier", "embedding_grad_atomic", "gelu_streams_ordered"])
def test_what_the_contention_cases_cost(name: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The determinism job of a correct kernel with and without its contention cases (the GELU's
    also repeats with the caller's stream held back: it uses streams of its own), and where the
    time went (the job's ``extra["timing"]``)."""
    times = {}
    for contention in (False, True):
        t = time.monotonic()
        r = determinism(name, 0, tmp_path / str(contention), monkeypatch, contention=contention)
        times[contention] = time.monotonic() - t
        assert r.status is Status.PASSED, [f.message for f in r.findings]
        cases = (r.extra.timing or {}).get("cases", [])
        print(f"\n{name}, contention {contention}: " + "; ".join(f"{c[0]} {c[2]}s" for c in cases))
    print(f"\ndeterminism job, {name}: {times[False]:.1f}s without contention cases, {times[True]:.1f}s with")


@pytest.mark.parametrize("seed", range(5))
@pytest.mark.parametrize("bug, twin", [("rms_pdl_reads_early", "rms_pdl_waits"),
                                       ("rms_own_stream_unordered", "rms_own_stream_ordered")])
def test_reads_before_the_producer_finished_are_caught_and_twins_pass(bug: str, twin: str, seed: int, tmp_path: Path,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    """producer=["x"]: a kernel of gpu-gate's writes x just before the repeats. The kernel that
    reads x before gdc_wait() under programmatic dependent launch, and the wrapper whose stream
    never waits for the caller's, read the fill there; their twins never do."""
    from gpu_gate.judge.checks.determinism import PRODUCED_ON_EVENT, PRODUCED_ON_STREAM

    t = time.monotonic()
    r = determinism(bug, seed, tmp_path, monkeypatch)
    print(f"\n{bug} seed {seed}: {r.status.value} in {time.monotonic() - t:.1f}s: "
          f"{[f.message[:200] for f in r.findings]}")
    assert r.status is Status.FAILED and {f.kind for f in r.findings} == {"read-before-producer"}, r.findings
    tally = r.findings[0].details["runs_differed"]
    print(f"{bug} seed {seed}: runs that differed: {tally}")
    names = "'x'"
    on_stream, on_event = PRODUCED_ON_STREAM.format(names=names), PRODUCED_ON_EVENT.format(names=names)
    assert tally[on_stream] >= 1
    if bug == "rms_own_stream_unordered":
        assert tally[on_event] >= 1
    t = time.monotonic()
    ok = determinism(twin, seed, tmp_path, monkeypatch)
    print(f"{twin} seed {seed}: {ok.status.value} in {time.monotonic() - t:.1f}s")
    assert ok.status is Status.PASSED, [f.message for f in ok.findings]


def test_what_the_producer_runs_cost(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The same correct kernel, its spec with producer= and without (gates.rms_pdl_waits_unproduced)."""
    times = {}
    for name in ("rms_pdl_waits_unproduced", "rms_pdl_waits"):
        t = time.monotonic()
        r = determinism(name, 0, tmp_path, monkeypatch)
        times[name] = time.monotonic() - t
        assert r.status is Status.PASSED, [f.message for f in r.findings]
    print(f"\ndeterminism job, rms spec: {times['rms_pdl_waits_unproduced']:.1f}s without producer=, "
          f"{times['rms_pdl_waits']:.1f}s with")


@pytest.mark.parametrize("seed", range(5))
def test_a_stream_that_reads_before_the_callers_stream_wrote_is_caught_and_its_twin_passes(
        seed: int, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Every other setting delays the wrapper's own stream, which hides its missing wait; with the
    caller's stream held back, the second step reads a buffer the first has not written yet."""
    from gpu_gate.judge.checks.determinism import CALLER_LATE

    r = determinism("gelu_streams_unordered", seed, tmp_path, monkeypatch)
    print(f"\ngelu_streams_unordered seed {seed}: {r.status.value}: {[f.message[:300] for f in r.findings]}")
    assert r.status is Status.FAILED and {f.kind for f in r.findings} == {"nondeterministic"}, r.findings
    tally = r.findings[0].details["runs_differed"]
    assert tally[CALLER_LATE] >= 1 and "side.wait_stream" in r.findings[0].message, tally
    ok = determinism("gelu_streams_ordered", seed, tmp_path, monkeypatch)
    assert ok.status is Status.PASSED, [f.message for f in ok.findings]
