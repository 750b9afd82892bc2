"""The Triton specializations a spec's cases launch: recorded where Triton launches them
(gpu_gate/worker/tritonlaunch.py), listed in the equivalence job's result, compiled for the
policy's architectures with their resources by the candidate's worker (gpu_gate/worker/specializations.py)
and judged by the judge (gpu_gate/judge/checks/compile_launched.py); on a GPU the equivalence job does this
(tests/gpu/test_tolerance_gpu.py).

Triton decides at import time whether kernels are interpreted, so what runs under
TRITON_INTERPRET=1 runs in a subprocess."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

pytest.importorskip("triton")

from gpu_gate.judge.checks import compile_launched  # noqa: E402
from gpu_gate.findings import Severity  # noqa: E402

KERNELS = '''\
import torch
import triton
import triton.language as tl


@triton.jit
def _scale_kernel(x_ptr, out_ptr, n_cols, stride, alpha, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    mask = cols < n_cols
    x = tl.load(x_ptr + row * stride + cols, mask=mask, other=0.0)
    tl.store(out_ptr + row * n_cols + cols, x * alpha, mask=mask)


@triton.jit
def _small_only(x_ptr, n, BLOCK: tl.constexpr):
    tl.static_assert(BLOCK <= 64, "BLOCK too large for this kernel")
    offs = tl.arange(0, BLOCK)
    tl.store(x_ptr + offs, tl.zeros([BLOCK], dtype=tl.float32), mask=offs < n)


@triton.jit
def _cast_kernel(x_ptr, out_ptr, n, X_dtype: tl.constexpr, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    x = tl.load(x_ptr + offs, mask=offs < n, other=0.0)
    tl.store(out_ptr + offs, (x.to(tl.float32) * 2).to(X_dtype), mask=offs < n)


def scale(x: torch.Tensor, alpha: float) -> torch.Tensor:
    rows, cols = x.shape
    out = torch.empty((rows, cols), dtype=x.dtype, device=x.device)
    _scale_kernel[(rows,)](x, out, cols, x.stride(0), alpha, BLOCK=triton.next_power_of_2(cols))
    return out
'''

SPEC = '''\
import gpu_gate as gg
from tlib.kern import scale


@gg.spec(dims={"rows": gg.Dim(1, 16), "cols": gg.Dim(1, 300)},
         inputs={"x": gg.Tensor(("rows", "cols"), dtypes=["float32", "float16"], layouts=["contiguous"])},
         params={"alpha": 0.5}, reference=lambda x, alpha: x * alpha)
def scale_gate(x, alpha):
    return scale(x, alpha)
'''


@pytest.fixture()
def root(tmp_path: Path) -> Path:
    (tmp_path / "tlib").mkdir()
    (tmp_path / "tlib" / "__init__.py").write_text("")
    (tmp_path / "tlib" / "kern.py").write_text(KERNELS)
    (tmp_path / "scale_gate.py").write_text(SPEC)
    return tmp_path


def _python(code: str, root: Path, *, interpret: bool) -> str:
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    if interpret:
        env["TRITON_INTERPRET"] = "1"
    p = subprocess.run([sys.executable, "-c", textwrap.dedent(code), str(root)], capture_output=True, text=True,
                       env=env, cwd=root, timeout=600)
    assert p.returncode == 0, p.stderr
    return p.stdout.strip().splitlines()[-1]


def test_launches_are_recorded_with_their_constexprs_and_argument_types(root: Path) -> None:
    out = _python("""
        import json, sys, torch
        sys.path.insert(0, sys.argv[1])
        from gpu_gate.worker.tritonlaunch import recording
        from tlib.kern import scale
        with recording() as rec:
            scale(torch.randn(3, 100), 0.5)
            scale(torch.randn(5, 100), 0.5)
            scale(torch.randn(2, 7).half(), 2.0)
        scale(torch.randn(2, 1000), 1.0)  # after the recording: not listed
        print(json.dumps([l.to_json() for l in rec.launches]))
        """, root, interpret=True)
    launches = json.loads(out)
    assert [(x["function"], x["constexprs"], x["count"]) for x in launches] == [
        ("_scale_kernel", {"BLOCK": 128}, 2), ("_scale_kernel", {"BLOCK": 8}, 1)]
    assert launches[1]["signature"] == {"x_ptr": "*fp16", "out_ptr": "*fp16", "n_cols": "i32", "stride": "i32",
                                        "alpha": "fp32"}
    assert launches[0]["file"].endswith("tlib/kern.py")


def test_the_equivalence_job_lists_the_launches_of_the_specs_kernels(root: Path) -> None:
    out = _python("""
        import json, sys
        from pathlib import Path
        from gpu_gate.inprocess import Context
        from gpu_gate.judge.job import run_job
        from gpu_gate.protocol.jobs import Job, SpecRef
        root = Path(sys.argv[1])
        job = Job(id="j", check="equivalence", level="required", kernels=("tlib/kern.py",),
                  spec=SpecRef("scale_gate.py", "scale_gate"), seed=0,
                  options={"cases": 6, "shrink": False, "compile": {"archs": ["sm_90"]}})
        r = run_job(job, Context(repo_root=root, device="cpu", workdir=root))
        print(json.dumps(r.to_json()))
        """, root, interpret=True)
    r = json.loads(out)
    assert r["status"] == "passed"
    launches = r["extra"]["specializations"]
    assert launches and {x["file"] for x in launches} == {"tlib/kern.py"}
    assert {x["signature"]["x_ptr"] for x in launches} == {"*fp32", "*fp16"}
    assert all(isinstance(x["constexprs"]["BLOCK"], int) for x in launches)
    # no GPU: where the interpreter ran them, the launches are compiled for the lint architecture and
    # their PTX read (races, 32-bit offsets), as on a GPU
    assert "launch_resources" in r["extra"] and r["extra"]["launches_linted"] == ["_scale_kernel"]


def test_a_launched_specialization_is_compiled_for_each_arch_with_its_resources(root: Path) -> None:
    """The worker compiles and reports facts; the judge makes them findings at the compile check's level."""
    out = _python("""
        import json, sys
        from pathlib import Path
        sys.path.insert(0, sys.argv[1])
        from gpu_gate.worker.specializations import compile_launched
        from gpu_gate.worker.tritonlaunch import Launch
        from tlib import kern
        sig = {"x_ptr": "*fp16", "out_ptr": "*fp16", "n_cols": "i32", "stride": "i32", "alpha": "fp32"}
        ok = Launch("kern.py", "_scale_kernel", {"BLOCK": 1024}, sig, {"num_warps": 4}, fn=kern._scale_kernel)
        big = Launch("kern.py", "_small_only", {"BLOCK": 128}, {"x_ptr": "*fp32", "n": "i32"}, {},
                     fn=kern._small_only)
        print(json.dumps(compile_launched([("tlib/kern.py", ok), ("tlib/kern.py", big)], ["sm_80", "sm_90"])))
        """, root, interpret=False)
    facts = json.loads(out)
    assert {e["arch"] for e in facts["errors"]} == {"sm_80", "sm_90"} and facts["not_compiled"] == 0
    assert all(isinstance(r["registers"], int) for r in facts["rows"]), "facts only: no findings from the worker"
    findings, rows = compile_launched.judge(facts, {"archs": ["sm_80", "sm_90"], "level": "required"})
    assert {(x["kernel"], x["arch"]) for x in rows} == {("_scale_kernel", "sm_80"), ("_scale_kernel", "sm_90")}
    assert all(x["registers"] > 0 and x["constexprs"] == {"BLOCK": 1024} for x in rows)
    assert all({"spill_store", "spill_load", "shared_bytes"} <= set(x) for x in rows)
    errors = [f for f in findings if f.kind == "compile-error"]
    assert {f.details["arch"] for f in errors} == {"sm_80", "sm_90"}
    assert all(f.severity is Severity.ERROR and "_small_only, as the cases launched it (BLOCK=128)" in f.message
               and "BLOCK too large" in f.message for f in errors)
    advisory, _ = compile_launched.judge(facts, {"archs": ["sm_90"], "level": "advisory"})
    assert {f.severity for f in advisory if f.kind == "compile-error"} == {Severity.WARNING}
    limited, _ = compile_launched.judge(facts, {"level": "required", "max_local_bytes": -1,
                                                "resources_level": "required"})
    assert [f.kind for f in limited if f.severity is Severity.ERROR].count("local-memory") == len(rows)


def test_a_dtype_constexpr_is_compiled_as_the_dtype_the_call_passed(root: Path) -> None:
    """Real kernels take dtypes as constexprs (Liger's RMSNorm backward: ``X_dtype=tl.float32``). The
    launch lists it as text ("fp32"), but compiles it as the dtype: compiled from the text, Triton
    took it for a string and every launched specialization was a compile error ("'str' object has
    no attribute 'scalar'"), a red gate on a correct kernel."""
    out = _python("""
        import json, sys, torch
        import triton.language as tl
        sys.path.insert(0, sys.argv[1])
        from gpu_gate.worker.tritonlaunch import describe
        from gpu_gate.worker.specializations import compile_launched
        from tlib import kern
        x = torch.randn(100)
        launch = describe(kern._cast_kernel, (x, torch.empty_like(x), 100), {"X_dtype": tl.bfloat16, "BLOCK": 128})
        print(json.dumps({"listed": launch.to_json()["constexprs"],
                          "compiled": compile_launched([("tlib/kern.py", launch)], ["sm_90"])}))
        """, root, interpret=False)
    facts = json.loads(out)
    assert facts["listed"] == {"X_dtype": "bf16", "BLOCK": 128}, "the result lists the dtype as text"
    assert facts["compiled"]["errors"] == [], facts["compiled"]["errors"]
    assert [(r["kernel"], r["arch"]) for r in facts["compiled"]["rows"]] == [("_cast_kernel", "sm_90")]


def test_what_the_worker_reports_is_read_field_by_field() -> None:
    """The worker is the candidate's process: its answer is checked, and what cannot be read is said,
    never trusted as a clean compile (a forged 'no errors, no rows' is still only what it says)."""
    for answer in (None, "ok", {"rows": [{"file": "k.py", "kernel": "k", "arch": "sm_90", "registers": -1}]},
                   {"errors": [{"file": "k.py", "kernel": "k", "arch": "sm_90", "error": 3}]},
                   {"rows": [{"kernel": "k", "arch": "sm_90", "registers": 8}]}):
        findings, rows = compile_launched.judge(answer, {"level": "required"})
        assert [f.kind for f in findings] == ["launches-unreadable"] and rows == [], answer
        assert findings[0].severity is Severity.ERROR
    findings, rows = compile_launched.judge({"rows": [], "errors": [], "not_compiled": 3}, {"level": "required"})
    assert [(f.kind, f.severity) for f in findings] == [("launches-not-compiled", Severity.NOTE)] and rows == []


def test_compiles_side_by_side_report_as_one_after_another(root: Path) -> None:
    """The launched specializations compile on several threads; the rows and the errors come out in
    the order of the launches and archs, the same as compiled one at a time."""
    out = _python("""
        import json, sys
        from pathlib import Path
        sys.path.insert(0, sys.argv[1])
        from gpu_gate.worker import specializations as sp
        from gpu_gate.worker.tritonlaunch import Launch
        from tlib import kern
        sig = {"x_ptr": "*fp16", "out_ptr": "*fp16", "n_cols": "i32", "stride": "i32", "alpha": "fp32"}
        launches = [("tlib/kern.py", Launch("kern.py", "_scale_kernel", {"BLOCK": b}, sig, {"num_warps": 4},
                                            fn=kern._scale_kernel)) for b in (64, 256, 1024, 4096)]
        launches.insert(2, ("tlib/kern.py", Launch("kern.py", "_small_only", {"BLOCK": 128},
                                                   {"x_ptr": "*fp32", "n": "i32"}, {}, fn=kern._small_only)))
        runs = {}
        for threads in (1, 8):
            sp.MAX_THREADS = threads
            runs[threads] = sp.compile_launched(launches, ["sm_80", "sm_90"])
        print(json.dumps(runs))
        """, root, interpret=False)
    runs = json.loads(out)
    assert runs["1"] == runs["8"]
    rows = runs["8"]["rows"]
    assert [(x["constexprs"]["BLOCK"], x["arch"]) for x in rows] == \
        [(b, a) for b in (64, 256, 1024, 4096) for a in ("sm_80", "sm_90")]
    assert [(e["kernel"], e["arch"]) for e in runs["8"]["errors"]] == [("_small_only", "sm_80"), ("_small_only", "sm_90")]


def _facts(*, errors=(), rows=()):
    where = {"file": "tlib/kern.py", "kernel": "_cast_kernel", "arch": "sm_90"}
    return {"errors": [{**where, "constexprs": c, "error": "CompilationError: at 4:10\nboom"} for c in errors],
            "rows": [{**where, "constexprs": c, "symbol": "_cast_kernel", "registers": 16} for c in rows],
            "not_compiled": 0}


def test_a_launched_specialization_that_fails_at_the_base_too_is_debt_not_the_change() -> None:
    """In a pull request the launched specializations that do not compile are looked up in what the
    base's worker compiled: failing there too, pre-existing (the policy's ``preexisting`` rule
    decides); compiling there, new; never launched by the base's cases, judged as they are."""
    from gpu_gate.verdict import Rules, _mode_for

    a, b, c = {"X_dtype": "fp32", "BLOCK": 128}, {"X_dtype": "bf16", "BLOCK": 128}, {"X_dtype": "fp32", "BLOCK": 64}
    head, _ = compile_launched.judge(_facts(errors=[a, b, c]), {"level": "required"})
    marked = compile_launched.against_base(head, _facts(errors=[a], rows=[b]), "0123456789abcdef")
    by = {json.dumps(f.details["constexprs"], sort_keys=True): f for f in marked if f.kind == "compile-error"}
    old, new, alone = (by[json.dumps(x, sort_keys=True)] for x in (a, b, c))
    assert old.details["change"] == "pre-existing" and old.message.startswith("pre-existing")
    assert new.details["change"] == "new" and new.message.startswith("new in this change")
    assert "change" not in alone.details and alone.severity is Severity.ERROR
    note = [f for f in marked if f.kind == "differential"]
    assert len(note) == 1 and "0123456789ab" in note[0].message and "1 new, 1 pre-existing" in note[0].message
    assert "1 the base's cases never launched" in note[0].message
    assert _mode_for(old, Rules()) == "warn", "debt does not block by default"
    assert _mode_for(old, Rules(preexisting="fail")) == "fail"
    assert _mode_for(new, Rules()) == "fail" and _mode_for(alone, Rules()) == "fail"


def test_a_base_answer_that_cannot_be_read_leaves_the_heads_errors_blocking() -> None:
    """The base's worker runs code under test too: an answer it cannot back up (not an object, or
    entries without a kernel) never turns the head's errors into debt."""
    a = {"X_dtype": "fp32", "BLOCK": 128}
    head, _ = compile_launched.judge(_facts(errors=[a]), {"level": "required"})
    for answer in (None, "all failed", {"errors": [{"constexprs": a, "error": "x"}]}):
        marked = compile_launched.against_base(head, answer, "0123456789abcdef")
        errors = [f for f in marked if f.kind == "compile-error"]
        assert len(errors) == 1 and "change" not in errors[0].details and errors[0].severity is Severity.ERROR
        assert any(f.kind == "differential" for f in marked)


ROWS = '''\
import triton
import triton.language as tl


@triton.jit
def _rows_kernel(Y, Y_stride, X, X_stride, n_cols, BLOCK: tl.constexpr):
    row = tl.program_id(0){widen}
    cols = tl.arange(0, BLOCK)
    mask = cols < n_cols
    x = tl.load(X + row * X_stride + cols, mask=mask, other=0.0)
    tl.store(Y + row * Y_stride + cols, x * 2.0, mask=mask)
'''

LAUNCH_ROWS = """
    import json, sys, torch
    sys.path.insert(0, sys.argv[1])
    from gpu_gate.worker.tritonlaunch import describe
    from gpu_gate.worker.specializations import compile_launched
    from tlib import rows
    x = torch.randn(4, 100)
    launches = [("tlib/rows.py", describe(rows._rows_kernel, (x, x.stride(0), x, x.stride(0), 100), {"BLOCK": b}))
                for b in (128, 256)]
    print(json.dumps(compile_launched(launches, ["sm_80", "sm_90"], root=sys.argv[1])))
    """


def _rows_answer(tmp_path: Path, name: str, widen: bool) -> dict:
    root = tmp_path / name
    (root / "tlib").mkdir(parents=True)
    (root / "tlib" / "__init__.py").write_text("")
    (root / "tlib" / "rows.py").write_text(ROWS.format(widen=".to(tl.int64)" if widen else ""))
    return json.loads(_python(LAUNCH_ROWS, root, interpret=False))


def test_offsets_in_32_bits_are_read_from_the_specializations_the_cases_launched(tmp_path: Path) -> None:
    """Most real Triton kernels get their constexprs at the call site, so the compile job cannot
    build them without policy values; the cases launch them. The worker sends the PTX of each
    launched specialization for the lint architecture as text, and the judge reads the 32-bit
    offsets in it: one warning per source line (by absolute rules), however many specializations
    share the line. The twin that widens the program index has none."""
    bug, fixed = _rows_answer(tmp_path, "bug", widen=False), _rows_answer(tmp_path, "fixed", widen=True)
    assert {p["arch"] for p in bug["ptx"]} == {"sm_90"} and len(bug["ptx"]) == 2, "one PTX per launch, lint arch only"
    findings, _ = compile_launched.judge(bug, {"archs": ["sm_80", "sm_90"], "level": "required"})
    hits = [f for f in findings if f.kind == "int32-offset"]
    assert hits and {f.file for f in hits} == {"tlib/rows.py"}, [f.file for f in hits]
    assert len({f.line for f in hits}) == len(hits), "one finding per line, not one per specialization"
    assert all(f.severity is Severity.WARNING and "as the cases launched it: BLOCK=128" in f.message for f in hits)
    assert {f.line for f in hits} == {10, 11}, "the load and the store"
    twin, _ = compile_launched.judge(fixed, {"archs": ["sm_80", "sm_90"], "level": "required"})
    assert [f for f in twin if f.kind == "int32-offset"] == [] and fixed["ptx"]
    assert compile_launched.offsets(fixed)[1] == {"_rows_kernel"}, "the twin's kernel was read"


def test_a_launched_32_bit_offset_blocks_only_when_the_change_brings_it(tmp_path: Path) -> None:
    """Against the base's launches: the bug brought back by a pull request is new, an error; the same
    code at base and head is debt; the base's answer is read as the head's is."""
    bug, fixed = _rows_answer(tmp_path, "bug", widen=False), _rows_answer(tmp_path, "fixed", widen=True)
    read: set[str] = set()
    head, _ = compile_launched.judge(bug, {"level": "required"}, read)
    assert read == compile_launched.offsets(bug)[1] == {"_rows_kernel"}, "judge says which kernels it read"
    back = compile_launched.against_base(head, fixed, "0123456789abcdef", read)
    new = [f for f in back if f.kind == "int32-offset"]
    assert new and all(f.details["change"] == "new" and f.severity is Severity.ERROR for f in new)
    assert any(f.kind == "differential" and f"{len(new)} new, 0 pre-existing" in f.message for f in back)
    debt = compile_launched.against_base(head, bug, "0123456789abcdef", read)
    assert all(f.details["change"] == "pre-existing" for f in debt if f.kind == "int32-offset")
    for forged in (None, {"ptx": "not a list"}, {"ptx": [{"ptx": "garbage"}]}):
        kept = [f for f in compile_launched.against_base(head, forged, "0123456789abcdef", read)
                if f.kind == "int32-offset"]
        assert kept and all(f.details.get("change") in (None, "new") for f in kept), forged


def test_the_ptx_sent_to_the_judge_stops_at_its_byte_cap_and_says_how_many_were_left_out(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A job that launches many large specializations sends PTX up to PTX_BYTES in all; the rest is
    counted, and the judge says that much was not read (never silently dropped)."""
    from types import SimpleNamespace

    from gpu_gate.worker.tritonc import TritonBuild
    from gpu_gate.worker.tritonlaunch import Launch
    from gpu_gate.worker import specializations as sp

    fn = SimpleNamespace(fn=lambda x_ptr, BLOCK: None)
    launches = [("tlib/k.py", Launch("/r/tlib/k.py", "k", {"BLOCK": b}, {"x_ptr": "*fp32"}, {}, fn=fn))
                for b in (16, 32, 64, 128)]
    known = {(launch.key, "sm_90"): TritonBuild("k", "x" * 400, []) for _, launch in launches}
    monkeypatch.setattr(sp, "PTX_BYTES", 1000)
    answer = sp.compile_launched(launches, ["sm_90"], known)
    assert [p["constexprs"]["BLOCK"] for p in answer["ptx"]] == [16, 32] and answer["ptx_left_out"] == 2
    findings, _ = compile_launched.judge(answer, {"level": "required"})
    assert any(f.kind == "launches-not-read" and "of 2 launched" in f.message for f in findings)
