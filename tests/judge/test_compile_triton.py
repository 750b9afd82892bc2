from __future__ import annotations

import shutil
from pathlib import Path

import pytest

pytest.importorskip("triton")

from gpu_gate.judge.checks import compile as compile_check  # noqa: E402
from gpu_gate.findings import Severity, Status
from gpu_gate.inprocess import Context  # noqa: E402
from gpu_gate.protocol.jobs import Job  # noqa: E402

DATA = Path(__file__).parent.parent / "data" / "cuda" / "tritonpkg"


def in_process(repo: Path) -> Context:
    """The judge's context with the compile worker in this process, on ``repo``."""
    return Context(repo_root=repo, device="cpu", workdir=repo.parent)


@pytest.fixture()
def repo(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.delenv("TRITON_INTERPRET", raising=False)
    root = tmp_path / "repo"
    shutil.copytree(DATA, root / "tkern")
    return root


def _job(**options: object) -> Job:
    return Job(id="j", check="compile", level="required", kernels=("tkern/kernels.py",), options=dict(options))


@pytest.mark.slow
def test_triton_kernels_compile_for_sm90_without_a_gpu(repo: Path) -> None:
    triton_opts = {"needs_block": {"constexprs": {"BLOCK": 64}},
                   "broken_kernel": {"signature": {"x_ptr": "*fp32", "n": "i32"}}}
    out = compile_check.run(_job(archs=["sm_90"], triton=triton_opts), in_process(repo))
    assert out.status is Status.FAILED
    kernels = {r["kernel"] for r in out.extra.resources}
    assert kernels == {"add_kernel", "needs_block"}
    add = next(r for r in out.extra.resources if r["kernel"] == "add_kernel")
    assert add["arch"].startswith("sm_90") and add["registers"] > 0
    [error] = [f for f in out.findings if f.severity is Severity.ERROR]
    assert (error.kind, error.file) == ("compile-error", "tkern/kernels.py")
    assert error.line == 23 and "broken_kernel" in error.message
    assert "undefined_name is not defined" in error.message
    notes = {f.message.split(":")[2].strip().split()[2] for f in out.findings if f.kind == "guessed-signature"}
    assert notes == {"add_kernel", "needs_block"}


@pytest.mark.slow
def test_constexpr_without_value_is_a_visible_warning_not_a_pass_nor_a_block(repo: Path) -> None:
    out = compile_check.run(_job(archs=["sm_90"]), in_process(repo))
    skipped = [f for f in out.findings if f.kind == "not-compiled-no-values"]
    (block,) = [f for f in skipped if "needs_block" in f.message]
    assert "not compiled: no values known for constexpr BLOCK" in block.message
    assert block.severity is Severity.WARNING and (block.file, block.line) == ("tkern/kernels.py", 15)
    # broken_kernel's guessed signature does not compile: said as a warning, never blamed on the kernel
    (guess,) = [f for f in skipped if "broken_kernel" in f.message]
    assert "no values known for its signature" in guess.message and guess.severity is Severity.WARNING
    assert not [f for f in out.findings if f.severity is Severity.ERROR]
    # add_kernel compiled: the job passed on what it could compile and lists the rest
    assert out.status is Status.PASSED and out.cases == 1


@pytest.mark.slow
def test_no_values_fail_makes_an_uncompiled_kernel_block(repo: Path) -> None:
    out = compile_check.run(_job(archs=["sm_90"], no_values="fail"), in_process(repo))
    assert out.status is Status.FAILED
    assert {f.kind for f in out.findings if f.severity is Severity.ERROR} == {"not-compiled-no-values"}


@pytest.mark.slow
def test_a_file_of_kernels_without_values_is_not_run_never_passed(repo: Path) -> None:
    """Nothing compiled checked nothing: not run, with how many of how many (issue 40), and the
    policy's no_values: warn is what lets it through, said in the result."""
    (repo / "tkern" / "kernels.py").write_text(
        "import triton\nimport triton.language as tl\n\n\n@triton.jit\n"
        "def fill(x_ptr, n, BLOCK: tl.constexpr, VALUE: tl.constexpr):\n"
        "    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)\n"
        "    tl.store(x_ptr + offs, tl.full([BLOCK], VALUE, tl.float32), mask=offs < n)\n")
    out = compile_check.run(_job(archs=["sm_80", "sm_90"]), in_process(repo))
    assert out.status is Status.NOT_RUN and out.cases == 0
    assert out.reason == "0 of 1 Triton kernel(s) compiled: no constexpr or signature values known"
    assert out.extra.not_run_allowed_by == "checks.compile.no_values: warn"
    (f,) = out.findings
    assert f.severity is Severity.WARNING and "constexpr BLOCK, VALUE" in f.message


@pytest.mark.slow
def test_an_error_inside_a_called_jit_function_is_named_not_shown_as_a_caret(repo: Path) -> None:
    """Triton reports an error in a @triton.jit function that the kernel calls with a source
    excerpt ending in a caret, and keeps the error itself in the exception's cause."""
    (repo / "tkern" / "kernels.py").write_text(
        "import triton\nimport triton.language as tl\n\n\n@triton.jit\n"
        "def gelu_ish(x):\n"
        "    return x * tl.sigmoid(x)\n")
    out = compile_check.run(_job(archs=["sm_90"]), in_process(repo))
    (guess,) = [f for f in out.findings if "gelu_ish" in f.message]
    assert "wrong type argument to unary minus" in guess.message, guess.message
    assert "one did not compile: ^)" not in guess.message
