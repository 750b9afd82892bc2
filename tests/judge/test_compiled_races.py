"""Races through global memory, read from the compiled code by the compile check (no GPU):
a spin lock released without a barrier after the block's stores, and a non-atomic scatter at
indexed addresses. Each planted race has its correct twin."""
from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from gpu_gate.judge.compiled import ptxlint
from gpu_gate.findings import JobResult, Severity
from gpu_gate.inprocess import Context
from gpu_gate.judge.job import run_job
from gpu_gate.protocol.jobs import Job

ROOT = Path(__file__).parent.parent / "corpus_races"
SIG = {"DY": "*fp32", "X": "*fp32", "DW": "*fp32", "Lock": "*i32", "stride": "i32", "n_cols": "i32"}
TRITON = {
    "partial_dw_no_barrier": {"signature": SIG, "constexprs": {"GROUPS": 4, "BLOCK": 128}},
    "partial_dw_barrier": {"signature": SIG, "constexprs": {"GROUPS": 4, "BLOCK": 128}},
    "embedding_grad_store": {"signature": {"IDS": "*i64", "G": "*fp32", "GW": "*fp32", "dim": "i32"},
                             "constexprs": {"BLOCK": 64}},
    "embedding_grad_atomic": {"signature": {"IDS": "*i64", "G": "*fp32", "GW": "*fp32", "dim": "i32"},
                              "constexprs": {"BLOCK": 64}},
    **{name: {"signature": {"X": "*fp32", "Partial": "*fp32", "Ready": "*i32", "Out": "*fp32", "n": "i32"},
              "constexprs": {"BLOCK": 256}} for name in ("split_sum_flag_store", "split_sum_flag_release")},
}


def compile_job(rel: str, tmp_path: Path) -> JobResult:
    job = Job(id=f"compile:{rel}", check="compile", level="required", kernels=(rel,),
              options={"archs": ["sm_90"], "triton": TRITON})
    return run_job(job, Context(repo_root=ROOT, device="cpu", workdir=tmp_path))


def _hits(r: JobResult) -> list[tuple[str, str | None, int | None, Severity]]:
    kinds = ("lock-release-without-barrier", "global-scatter-without-atomics")
    return sorted((f.kind, f.file, f.line, f.severity) for f in r.findings if f.kind in kinds)


needs_nvcc = pytest.mark.skipif(shutil.which("nvcc") is None and not Path("/usr/local/cuda/bin/nvcc").exists(),
                                reason="nvcc is not installed")


@needs_nvcc
def test_cuda_races_are_found_at_their_lines(tmp_path: Path) -> None:
    r = compile_job("races_bug.cu", tmp_path)
    assert _hits(r) == [("global-scatter-without-atomics", "races_bug.cu", 20, Severity.NOTE),
                        ("lock-release-without-barrier", "races_bug.cu", 12, Severity.ERROR),
                        ("lock-release-without-barrier", "races_bug.cu", 31, Severity.ERROR),
                        ("lock-release-without-barrier", "races_bug.cu", 48, Severity.ERROR)]
    assert r.status.value == "failed"
    lock = next(f for f in r.findings if f.kind == "lock-release-without-barrier" and f.line == 12)
    assert "st.global" in lock.details["ptx"] and "atom.global.exch" in lock.details["ptx"]
    assert "releases a lock" in lock.message
    flags = {f.line: f.message for f in r.findings if f.kind == "lock-release-without-barrier" and f.line != 12}
    assert "sets a flag that its programs poll right after its global stores, with no block barrier and no fence" \
        in flags[31]
    assert "with no fence between them" in flags[48] and "no block barrier" not in flags[48]


@needs_nvcc
def test_cuda_twins_are_clean(tmp_path: Path) -> None:
    r = compile_job("races_fixed.cu", tmp_path)
    assert _hits(r) == [] and r.status.value == "passed", [f.message for f in r.findings]


def test_triton_scatter_is_a_note_and_the_atomic_twin_is_clean(tmp_path: Path) -> None:
    r = compile_job("tt_locks.py", tmp_path)
    hits = _hits(r)
    assert ("global-scatter-without-atomics", "tt_locks.py", 49, Severity.NOTE) in hits, hits
    assert not [h for h in hits if h[0] == "global-scatter-without-atomics" and h[2] != 49]


def test_a_triton_flag_raised_by_a_plain_store_is_a_race_and_the_released_twin_is_clean(tmp_path: Path) -> None:
    """split_sum_flag_store raises its ready flag with tl.store right after the partials; its twin
    puts tl.debug_barrier() and a releasing tl.atomic_xchg there. Only the first is flagged."""
    r = compile_job("tt_flags.py", tmp_path)
    hits = _hits(r)
    assert hits == [("lock-release-without-barrier", "tt_flags.py", 13, Severity.ERROR)], hits
    f = next(f for f in r.findings if f.kind == "lock-release-without-barrier")
    assert f.details["kernel"] == "split_sum_flag_store" and "sets a flag" in f.message
    assert "ld.volatile" not in f.details["ptx"] and "st.global" in f.details["ptx"]


def test_the_check_reads_the_toolchain_in_use(tmp_path: Path) -> None:
    """Triton 3.9 puts a bar.sync before the scalar release by itself, so its build of the
    no-barrier kernel is race-free; Triton 3.6 does not (checked on a GPU runner, where the
    device's Triton compiles it: tests/gpu/test_compiled_races_gpu.py). The same PTX with that
    barrier taken out is what the older compiler emits, and it is flagged at the release."""
    import triton

    from gpu_gate.worker import tritonc

    import importlib.util
    spec = importlib.util.spec_from_file_location("tt_locks_probe", ROOT / "tt_locks.py")
    assert spec and spec.loader
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    fn = mod.partial_dw_no_barrier
    ptx = tritonc.compile_kernel(fn, tritonc.config_from_options(fn, TRITON["partial_dw_no_barrier"]), 90).ptx
    if "bar.sync" in ptx:
        assert not ptxlint.lint(ptx), f"triton {triton.__version__}"
        older = "\n".join(line for line in ptx.splitlines() if "bar.sync" not in line)
    else:
        older = ptx
    hits = ptxlint.lint(older)
    assert [(h.kind, Path(h.file or "").name, h.line) for h in hits] == [
        ("lock-release-without-barrier", "tt_locks.py", 22)]


def test_an_exchange_to_one_after_stores_is_an_acquire_not_a_release() -> None:
    ptx = """
.file 1 "k.cu"
.visible .entry acquire(.param .u64 p)
{
    .loc 1 3 5
    st.global.f32 [%rd1], %f1;
    mov.u32 %r1, 1;
    .loc 1 4 5
    atom.global.exch.b32 %r2, [%rd2], %r1;
    .loc 1 5 5
    mov.u32 %r3, 0;
    atom.global.exch.b32 %r4, [%rd2], %r3;
}
"""
    hits = ptxlint.lint(ptx)
    assert [(h.kind, h.line) for h in hits] == [("lock-release-without-barrier", 5)]


def test_putting_a_flag_down_is_not_raising_it() -> None:
    """A kernel that clears its ready flags (to 0) after other stores, then polls them, publishes
    nothing by the clear: no finding. Raising the same flag (to 1) there is one."""
    ptx = """
.file 1 "k.cu"
.visible .entry clears(.param .u64 clears_param_0, .param .u64 clears_param_1)
{
    ld.param.u64 %rd1, [clears_param_0];
    ld.param.u64 %rd2, [clears_param_1];
    cvta.to.global.u64 %rd3, %rd1;
    cvta.to.global.u64 %rd4, %rd2;
    .loc 1 3 5
    st.global.f32 [%rd3], %f1;
    mov.u32 %r1, VALUE;
    .loc 1 4 5
    st.global.u32 [%rd4], %r1;
$L__BB0_1:
    .loc 1 5 5
    ld.volatile.global.u32 %r2, [%rd4];
    setp.eq.s32 %p1, %r2, 0;
    @%p1 bra $L__BB0_1;
}
"""
    assert ptxlint.lint(ptx.replace("VALUE", "0")) == []
    hits = ptxlint.lint(ptx.replace("VALUE", "1"))
    assert [(h.kind, h.line, h.flag, h.barrier, h.fence) for h in hits] == [
        ("lock-release-without-barrier", 4, True, False, False)]
