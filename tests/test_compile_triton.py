from __future__ import annotations

import dataclasses
import shutil
from pathlib import Path

import pytest

pytest.importorskip("triton")

from gpu_gate.checks import compile as compile_check  # noqa: E402
from gpu_gate.findings import Severity, Status  # noqa: E402
from gpu_gate.jobs import Job  # noqa: E402

DATA = Path(__file__).parent / "data" / "cuda" / "tritonpkg"


@dataclasses.dataclass
class Ctx:
    repo_root: Path


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
    out = compile_check.run(_job(archs=["sm_90"], triton=triton_opts), Ctx(repo))
    assert out.status is Status.FAILED
    kernels = {r["kernel"] for r in out.extra["resources"]}
    assert kernels == {"add_kernel", "needs_block"}
    add = next(r for r in out.extra["resources"] if r["kernel"] == "add_kernel")
    assert add["arch"].startswith("sm_90") and add["registers"] > 0
    [error] = [f for f in out.findings if f.severity is Severity.ERROR]
    assert (error.kind, error.file) == ("compile-error", "tkern/kernels.py")
    assert error.line == 23 and "broken_kernel" in error.message
    assert "undefined_name is not defined" in error.message
    notes = {f.message.split(":")[2].strip().split()[2] for f in out.findings if f.kind == "guessed-signature"}
    assert notes == {"add_kernel", "needs_block"}


@pytest.mark.slow
def test_constexpr_without_value_is_a_visible_skip_not_a_pass(repo: Path) -> None:
    out = compile_check.run(_job(archs=["sm_90"]), Ctx(repo))
    skipped = [f for f in out.findings if f.kind == "not-compiled"]
    assert any("needs_block" in f.message and "constexpr BLOCK has no default" in f.message for f in skipped)
    # broken_kernel's guessed signature does not compile: said as a note, never blamed on the kernel
    assert any("broken_kernel" in f.message and "guessed signature did not compile" in f.message for f in skipped)
    assert all(f.severity is Severity.NOTE for f in out.findings)
