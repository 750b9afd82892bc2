"""Address offsets computed in 32 bits, read from the compiled code by the compile check (no GPU):
``program index x row stride`` in 32-bit arithmetic wraps past 2^31 elements, which no case small
enough to run shows. Each planted kernel has its twin that widens the index first, and kernels
whose only 32-bit product has a constant factor are not reported."""
from __future__ import annotations

import importlib.util
import shutil
from pathlib import Path

import pytest

from gpu_gate.job_extra import JobExtra
from gpu_gate.judge.compiled import ptx_offsets
from gpu_gate.worker import tritonc
from gpu_gate.findings import Finding, JobResult, Severity, Status
from gpu_gate.inprocess import Context
from gpu_gate.judge.job import run_job
from gpu_gate.protocol.jobs import Job

ROOT = Path(__file__).parent.parent / "corpus_offsets"
ROWS = {"signature": {"Y": "*fp32", "Y_stride": "i32", "X": "*fp32", "X_stride": "i32", "n_cols": "i32"},
        "constexprs": {"BLOCK": 1024}}
TILES = {"signature": {"Y": "*fp32", "X": "*fp32", "S": "*fp32", "M": "i32", "N": "i32"}, "constexprs": {"BLOCK": 64}}
TRITON = {"scale_rows_int32": ROWS, "scale_rows_int64": ROWS, "dequant_tiles_int32": TILES,
          "dequant_tiles_int64": TILES,
          "copy_blocks": {"signature": {"Y": "*fp32", "X": "*fp32", "n": "i32"}, "constexprs": {"BLOCK": 1024}}}

needs_nvcc = pytest.mark.skipif(shutil.which("nvcc") is None and not Path("/usr/local/cuda/bin/nvcc").exists(),
                                reason="nvcc is not installed")


def compile_job(rel: str, tmp_path: Path) -> JobResult:
    job = Job(id=f"compile:{rel}", check="compile", level="required", kernels=(rel,),
              options={"archs": ["sm_90"], "triton": TRITON})
    return run_job(job, Context(repo_root=ROOT, device="cpu", workdir=tmp_path))


def _offsets(r: JobResult) -> list[tuple[str, str | None, int | None, Severity]]:
    return sorted((f.details["kernel"], f.file, f.line, f.severity) for f in r.findings if f.kind == "int32-offset")


def test_triton_row_offsets_in_32_bits_are_reported_at_their_lines_and_the_widened_twins_are_not(
        tmp_path: Path) -> None:
    r = compile_job("tt_rows.py", tmp_path)
    assert _offsets(r) == [("dequant_tiles_int32", "tt_rows.py", 33, Severity.WARNING),
                           ("scale_rows_int32", "tt_rows.py", 12, Severity.WARNING),
                           ("scale_rows_int32", "tt_rows.py", 13, Severity.WARNING)], _offsets(r)
    f = next(f for f in r.findings if f.kind == "int32-offset" and f.line == 33)
    assert "the product: line 31" in f.message  # offs = offs_m[:, None] * N, used for the load at 33
    assert ".lo.s32" in f.details["ptx"] and ".wide." in f.details["ptx"]
    assert "tl.program_id(0).to(tl.int64)" in f.message and "2^31" in f.message
    # advisory by absolute rules: most kernels never see 2^31 elements
    assert r.status.value == "passed", [x.message for x in r.findings]


@needs_nvcc
def test_cuda_row_offsets_in_32_bits_are_reported_and_the_widened_twin_is_clean(tmp_path: Path) -> None:
    r = compile_job("rows_bug.cu", tmp_path)
    assert _offsets(r) == [("scale_rows", "rows_bug.cu", 5, Severity.WARNING)], _offsets(r)
    clean = compile_job("rows_fixed.cu", tmp_path / "fixed")
    assert _offsets(clean) == [] and clean.status.value == "passed", [x.message for x in clean.findings]


def _kernel(name: str):  # type: ignore[no-untyped-def]
    spec = importlib.util.spec_from_file_location("tt_rows_probe", ROOT / "tt_rows.py")
    assert spec and spec.loader
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return getattr(mod, name)


def test_a_product_that_stays_32_bit_is_not_an_offset() -> None:
    """The same multiply, used for a comparison and never widened to an address, is not reported;
    widened, it is."""
    ptx = """
.visible .entry k(.param .u64 k_param_0, .param .u32 k_param_1)
{
	ld.param.u64 	%rd1, [k_param_0];
	ld.param.u32 	%r1, [k_param_1];
	mov.u32 	%r2, %ctaid.x;
	mul.lo.s32 	%r3, %r2, %r1;
	setp.lt.s32 	%p1, %r3, 100;
	add.s32 	%r4, %r3, 7;
	@%p1 bra 	$L_end;
	mul.wide.s32 	%rd2, %r4, 4;
	add.s64 	%rd3, %rd1, %rd2;
	st.global.u32 	[%rd3], %r4;
$L_end:
	ret;
}
"""
    hits = ptx_offsets.lint(ptx)
    assert [(h.kind, h.kernel) for h in hits] == [("int32-offset", "k")]
    assert "mul.wide.s32" in hits[0].excerpt  # reached through the add
    never_widened = "\n".join(line for line in ptx.splitlines() if "mul.wide" not in line)
    assert ptx_offsets.lint(never_widened) == []


def test_the_fixed_form_compiles_to_64_bit_arithmetic() -> None:
    """What the fix does to the code, seen by the check: the widened index multiplies in 64 bits."""
    fn = _kernel("scale_rows_int64")
    ptx = tritonc.compile_kernel(fn, tritonc.config_from_options(fn, ROWS), 90).ptx
    assert "mul.lo.s64" in ptx and ptx_offsets.lint(ptx) == []
    fn = _kernel("copy_blocks")
    ptx = tritonc.compile_kernel(fn, tritonc.config_from_options(fn, TRITON["copy_blocks"]), 90).ptx
    assert ptx_offsets.lint(ptx) == []


def _result(*findings: Finding, linted: tuple[str, ...] = ()) -> JobResult:
    return JobResult(job_id="compile:k.py", check="compile", status=Status.PASSED, level="required",
                     kernels=("k.py",), findings=list(findings), extra=JobExtra(linted=list(linted)))


def _lint(kind: str, kernel: str, line: int, severity: Severity = Severity.WARNING) -> Finding:
    return Finding("compile", kind, f"k.py:{line}: kernel {kernel}", severity, file="k.py", line=line,
                   details={"kernel": kernel})


def test_against_the_base_counts_per_kernel_and_kind() -> None:
    """Lines move in a change: findings are matched by kernel and kind, by count. One more in a
    kernel than the base had is new (a new 32-bit offset blocks); a race the base has too is debt;
    a kernel the base's build does not have (new in an existing file) is judged by absolute rules."""
    from gpu_gate.judge.checks.compiled_base import against_base
    from gpu_gate.protocol.jobs import Job

    job = Job(id="compile:k.py", check="compile", level="required", kernels=("k.py",))
    head = _result(_lint("int32-offset", "a", 10), _lint("int32-offset", "a", 11), _lint("int32-offset", "b", 20),
                   _lint("lock-release-without-barrier", "c", 30, Severity.ERROR), _lint("int32-offset", "e", 50))
    base = _result(_lint("int32-offset", "a", 8), _lint("int32-offset", "a", 9),
                   _lint("lock-release-without-barrier", "c", 28, Severity.ERROR), _lint("int32-offset", "d", 40),
                   linted=("a", "b", "c", "d"))
    out = against_base(job, head, base, "0123456789abcdef")
    marks = [(f.details.get("kernel"), f.severity.value, f.details.get("change")) for f in out.findings
             if f.kind != "differential"]
    assert marks == [("a", "warning", "pre-existing"), ("a", "warning", "pre-existing"), ("b", "error", "new"),
                     ("c", "error", "pre-existing"), ("e", "warning", None), ("d", "note", "fixed")], marks
    assert out.findings[-1].message.endswith("has no such kernel or could not build it: e")
    assert out.status is Status.FAILED  # the new offset in b
    # a base whose build gave no result: nothing is compared, and the run says so
    alone = against_base(job, head, None, "0123456789abcdef")
    assert [f.details.get("change") for f in alone.findings] == [None] * 6
    assert "not compared with the base's build (0123456789ab)" in alone.findings[-1].message
    # nothing read from either build: the result is the head's as it was
    plain = _result(Finding("compile", "guessed-signature", "x", Severity.NOTE))
    assert against_base(job, plain, _result(), "0123456789abcdef") == plain


def test_a_value_read_at_the_programs_address_is_data_not_the_program_index() -> None:
    """A ticket taken with an atomic at an address computed from the program index, times a stride:
    the ticket is data, like a loaded row index (gather_rows in rows_bug.cu), and is not reported."""
    ptx = """
.visible .entry k(.param .u64 k_param_0, .param .u32 k_param_1)
{
	ld.param.u64 	%rd1, [k_param_0];
	ld.param.u32 	%r1, [k_param_1];
	mov.u32 	%r2, %ctaid.x;
	mul.wide.u32 	%rd2, %r2, 4;
	add.s64 	%rd3, %rd1, %rd2;
	atom.global.add.u32 	%r5, [%rd3], 1;
	mul.lo.s32 	%r6, %r5, %r1;
	mul.wide.s32 	%rd4, %r6, 4;
	add.s64 	%rd5, %rd1, %rd4;
	st.global.u32 	[%rd5], %r6;
	ret;
}
"""
    assert ptx_offsets.lint(ptx) == []
    # the same product of the program index itself is reported
    assert len(ptx_offsets.lint(ptx.replace("mul.lo.s32 \t%r6, %r5, %r1", "mul.lo.s32 \t%r6, %r2, %r1"))) == 1


def test_a_base_that_could_not_build_a_kernel_makes_nothing_of_it_new() -> None:
    """A pull request that repairs a kernel file which did not import at the base, or one kernel
    that did not compile there: nothing was read from the base's build of it, so the head's
    findings there are judged by absolute rules (a 32-bit offset stays a warning), never as new."""
    from gpu_gate.judge.checks.compiled_base import against_base
    from gpu_gate.protocol.jobs import Job

    job = Job(id="compile:k.py", check="compile", level="required", kernels=("k.py",))
    head = _result(_lint("int32-offset", "a", 10), _lint("int32-offset", "b", 20))
    broken = _result(Finding("compile", "import-error", "k.py: importing the module failed: ImportError: x",
                             Severity.ERROR, file="k.py"))
    out = against_base(job, head, broken, "0123456789abcdef")
    assert [(f.severity.value, f.details.get("change")) for f in out.findings[:2]] == [("warning", None)] * 2
    assert "not compared with the base's build" in out.findings[-1].message and "ImportError" in out.findings[-1].message
    one = _result(_lint("int32-offset", "a", 9),
                  Finding("compile", "compile-error", "k.py:19: Triton kernel b does not compile for sm_90: x",
                          Severity.ERROR, file="k.py", line=19, details={"kernel": "b"}), linted=("a",))
    out = against_base(job, head, one, "0123456789abcdef")
    assert [(f.details.get("kernel"), f.severity.value, f.details.get("change")) for f in out.findings[:2]] == [
        ("a", "warning", "pre-existing"), ("b", "warning", None)]
    assert out.findings[-1].message.endswith("has no such kernel or could not build it: b")
