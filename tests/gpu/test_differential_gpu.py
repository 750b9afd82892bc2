"""Differential runs on a GPU: a Triton kernel at the base and at the head, the same cases on both.

A change that brings a tail bug is new and blocks; a change that leaves the base's tail bug alone
is green with the bug listed as the repository's debt; a change that fixes it is reported as fixed.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

POLICY = """\
version: 1
kernels: {include: ["mylib/**/*.py"]}
specs: ["gate/**/*_gate.py"]
checks:
  compile: off
  determinism: off
  memcheck: off
  racecheck: off
  synccheck: off
  initcheck: off
  equivalence: {cases: 12, growth: false, shrink: false}
cache: {enabled: false}
"""

KERNEL = '''\
import torch
import triton
import triton.language as tl


@triton.jit
def _scale_rows(x, y, n_cols, stride, BLOCK: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    cols = tl.arange(0, BLOCK)
    mask = cols < n_cols
    v = tl.load(x + row * stride + cols, mask=mask, other=0.0)
    tl.store(y + row * n_cols + cols, v * 3.0, mask=mask)


def scale_rows(x):
    x = x.contiguous()
    y = torch.empty_like(x)
    n_cols = x.shape[-1]
    _scale_rows[(x.shape[0],)](x, y, n_cols, x.stride(0), BLOCK=triton.next_power_of_2(n_cols))
    return y
'''

TAIL_BUG = KERNEL.replace("mask = cols < n_cols", "mask = cols < n_cols - (n_cols > 100)")

SPEC = """\
import torch
import gpu_gate as gg
from mylib.scale import scale_rows


@gg.spec(dims={"rows": gg.Dim(1, 512), "cols": gg.Dim(1, 4096)},
         inputs={"x": gg.Tensor(("rows", "cols"), dtypes=["float32", "bfloat16"])},
         reference=lambda x: x * 3)
def scale_rows_gate(x):
    return scale_rows(x)
"""


def _git(repo: Path, *args: str) -> str:
    env = {**os.environ, "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@example.com",
           "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@example.com"}
    return subprocess.run(["git", *args], cwd=repo, env=env, check=True, capture_output=True, text=True).stdout


def _gate(tmp_path: Path, base_kernel: str, head_kernel: str, spec: str = SPEC, policy: str = POLICY
          ) -> tuple[int, str, list[dict]]:  # type: ignore[type-arg]
    repo = tmp_path / "repo"
    (repo / "mylib").mkdir(parents=True)
    (repo / "gate").mkdir()
    (repo / ".gpu-gate.yml").write_text(policy)
    (repo / "mylib" / "__init__.py").write_text("")
    (repo / "mylib" / "scale.py").write_text(base_kernel)
    (repo / "gate" / "scale_gate.py").write_text(spec)
    _git(repo, "init", "-q", "-b", "main")
    _git(repo, "add", "-A")
    _git(repo, "commit", "-q", "-m", "base")
    (repo / "mylib" / "scale.py").write_text(head_kernel + "\n_REVIEWED = True\n")  # a token, so it is a change
    _git(repo, "checkout", "-q", "-b", "feature")
    _git(repo, "commit", "-qam", "head")
    p = subprocess.run([sys.executable, "-m", "gpu_gate.cli", "check", "--base", "main"], cwd=repo,
                       capture_output=True, text=True, timeout=600)
    out = repo / ".gpu-gate" / "out"
    assert (out / "results.json").is_file(), f"the gate wrote no results (exit {p.returncode}):\n{p.stdout}\n{p.stderr}"
    results = json.loads((out / "results.json").read_text())["results"]
    findings = [f for r in results for f in r["findings"]]
    return p.returncode, p.stdout + p.stderr + (out / "report.md").read_text(), findings


WRONG_VALUES = {"mismatch", "nan"}  # the unwritten tail reads as NaN (fresh buffers are NaN-filled) or garbage


def _changes(findings: list[dict]) -> dict[str, set[str]]:  # type: ignore[type-arg]
    out: dict[str, set[str]] = {}
    for f in findings:
        if f["details"].get("change"):
            out.setdefault(f["details"]["change"], set()).add(f["kind"])
    return out


def test_a_tail_bug_the_change_brings_is_new(tmp_path: Path) -> None:
    code, text, findings = _gate(tmp_path, KERNEL, TAIL_BUG)
    assert code == 1, text
    assert _changes(findings).get("new", set()) & WRONG_VALUES, text
    assert "pre-existing" not in _changes(findings), text


def test_the_bases_tail_bug_is_debt_not_this_changes(tmp_path: Path) -> None:
    code, text, findings = _gate(tmp_path, TAIL_BUG, TAIL_BUG)
    assert code == 0, text
    assert _changes(findings).get("pre-existing", set()) & WRONG_VALUES, text
    assert "new" not in _changes(findings), text
    assert any(f["kind"] == "differential" and " on 12 of 12 cases" in f["message"] for f in findings), text
    assert "### Pre-existing failures" in text


def test_a_fix_is_reported_as_fixed(tmp_path: Path) -> None:
    code, text, findings = _gate(tmp_path, TAIL_BUG, KERNEL)
    assert code == 0, text
    assert _changes(findings).get("fixed", set()) & WRONG_VALUES, text
    assert "### Fixed by this change" in text


# --- 32-bit offsets, read from the specializations the cases launched ------------------------
# BLOCK has no default, so the compile job cannot build the kernel without policy values; the
# equivalence job's cases launch it, and the judge reads the launched PTX (checks/compile_launched).

NARROW = KERNEL.replace("row = tl.program_id(0).to(tl.int64)", "row = tl.program_id(0)")
POLICY_COMPILE = POLICY.replace("  compile: off\n", "")


def _offsets(findings: list[dict]) -> list[dict]:  # type: ignore[type-arg]
    return [f for f in findings if f["kind"] == "int32-offset"]


def test_a_32_bit_offset_the_change_brings_is_read_from_the_launches_and_blocks(tmp_path: Path) -> None:
    code, text, findings = _gate(tmp_path, KERNEL, NARROW, policy=POLICY_COMPILE)
    assert code == 1, text
    new = [f for f in _offsets(findings) if f["details"].get("change") == "new"]
    assert new and all(f["severity"] == "error" and "as the cases launched it" in f["message"] for f in new), text


def test_a_32_bit_offset_the_base_has_too_is_debt(tmp_path: Path) -> None:
    code, text, findings = _gate(tmp_path, NARROW, NARROW, policy=POLICY_COMPILE)
    assert code == 0, text
    assert _offsets(findings) and all(f["details"].get("change") == "pre-existing" for f in _offsets(findings)), text


# --- determinism: fp32 atomics, whose order changes from run to run --------------------------

COLSUM = '''\
import torch
import triton
import triton.language as tl


@triton.jit
def _col_sum(x, y, n_cols, BLOCK: tl.constexpr):
    row = tl.program_id(0).to(tl.int64)
    cols = tl.arange(0, BLOCK)
    mask = cols < n_cols
    v = tl.load(x + row * n_cols + cols, mask=mask, other=0.0)
    tl.atomic_add(y + cols, v, mask=mask)


def col_sum(x):
    x = x.contiguous().float()
    y = torch.zeros(x.shape[1], dtype=torch.float32, device=x.device)
    _col_sum[(x.shape[0],)](x, y, x.shape[1], BLOCK=triton.next_power_of_2(x.shape[1]))
    return y
'''
COLSUM_TORCH = COLSUM.replace('''    y = torch.zeros(x.shape[1], dtype=torch.float32, device=x.device)
    _col_sum[(x.shape[0],)](x, y, x.shape[1], BLOCK=triton.next_power_of_2(x.shape[1]))
    return y''', '''    return x.sum(0)''')

COLSUM_SPEC = """\
import gpu_gate as gg
from mylib.scale import col_sum


@gg.spec(dims={"rows": gg.Dim(1, 8192), "cols": gg.Dim(1, 256)},
         inputs={"x": gg.Tensor(("rows", "cols"), dtypes=["float32"])},
         reference=lambda x: x.sum(0), deterministic=True)
def col_sum_gate(x):
    return col_sum(x)
"""


def _det_gate(tmp_path: Path, base: str, head: str) -> tuple[int, str, list[dict]]:  # type: ignore[type-arg]
    return _gate(tmp_path, base, head, COLSUM_SPEC, POLICY.replace("  determinism: off\n", "  determinism: {repeats: 4}\n"))


def test_atomics_the_base_has_too_are_debt(tmp_path: Path) -> None:
    code, text, findings = _det_gate(tmp_path, COLSUM, COLSUM)
    assert code == 0, text
    det = [f for f in findings if f["check"] == "determinism" and f["severity"] == "error"]
    assert det and all(f["details"].get("change") == "pre-existing" for f in det), text
    assert "new" not in _changes(findings), text


def test_atomics_the_change_brings_block(tmp_path: Path) -> None:
    code, text, findings = _det_gate(tmp_path, COLSUM_TORCH, COLSUM)
    assert code == 1, text
    new = _changes(findings).get("new", set())
    assert "nondeterministic" in new or "unstable" in new, text


# --- memcheck: the base's worker runs under the tool too ------------------------------------

# A stencil's off-by-one: the last thread reads one element past the end of x. The value read
# decides y only when it is exactly 1234.5, so no compiler may drop the load; and what lies past
# the end (whatever the allocator left there, NaN included) leaves y as it is: the equivalence job
# of the same gate sees the same values at the base and at the head, and the memcheck report is
# the only difference there is to find.
READ_PAST = """\
extern "C" __global__ void scale_past(const float* x, float* y, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) { float next = x[i + 1]; y[i] = next == 1234.5f ? 0.0f : 3.0f * x[i]; }
}
"""
READ_IN = READ_PAST.replace("float next = x[i + 1]; y[i] = next == 1234.5f ? 0.0f : 3.0f * x[i];",
                            "y[i] = 3.0f * x[i];")

CU_SPEC = """\
import gpu_gate as gg


@gg.spec(dims={"n": gg.Dim(1, 5000)}, inputs={"x": gg.Tensor(("n",), dtypes=["float32"])},
         reference=lambda x: 3 * x, covers=["mylib/past.cu"], devices=("cuda",))
def scale_rows_gate(x):
    k = gg.cuda.load("mylib/past.cu", "scale_past")
    x = x.contiguous()
    y = gg.empty_like(x)
    n = x.numel()
    k(((n + 255) // 256,), (256,), x, y, gg.cuda.int32(n))
    return y
"""

MEMCHECK_POLICY = POLICY.replace('kernels: {include: ["mylib/**/*.py"]}', 'kernels: {include: ["mylib/**/*.cu"]}') \
    .replace("  memcheck: off\n", "  memcheck: {level: required, cases: 3}\n") \
    .replace("equivalence: {cases: 12, growth: false, shrink: false}", "equivalence: {cases: 6, growth: false, shrink: false}")


def _memcheck_gate(tmp_path: Path, base: str, head: str) -> tuple[int, str, list[dict]]:  # type: ignore[type-arg]
    repo = tmp_path / "repo"
    (repo / "mylib").mkdir(parents=True)
    (repo / "mylib" / "past.cu").write_text(base)
    (repo / "gate").mkdir()
    (repo / ".gpu-gate.yml").write_text(MEMCHECK_POLICY)
    (repo / "gate" / "scale_gate.py").write_text(CU_SPEC)
    _git(repo, "init", "-q", "-b", "main")
    _git(repo, "add", "-A")
    _git(repo, "commit", "-q", "-m", "base")
    _git(repo, "checkout", "-q", "-b", "feature")
    (repo / "mylib" / "past.cu").write_text("static const int reviewed_ = 1;  // a token: a comment alone is no change\n" + head)
    _git(repo, "commit", "-qam", "head")
    p = subprocess.run([sys.executable, "-m", "gpu_gate.cli", "check", "--base", "main"], cwd=repo,
                       capture_output=True, text=True, timeout=600)
    out = repo / ".gpu-gate" / "out"
    assert (out / "results.json").is_file(), f"the gate wrote no results (exit {p.returncode}):\n{p.stdout}\n{p.stderr}"
    results = json.loads((out / "results.json").read_text())["results"]
    findings = [f for r in results if r["check"] == "memcheck" for f in r["findings"]]
    return p.returncode, p.stdout + p.stderr + (out / "report.md").read_text(), findings


def _memcheck_changes(findings: list[dict]) -> list[tuple[str, str]]:  # type: ignore[type-arg]
    return sorted((f["kind"], f["details"]["change"]) for f in findings if f["details"].get("change"))


def test_memcheck_an_overrun_the_change_brings_is_new(tmp_path: Path) -> None:
    code, text, findings = _memcheck_gate(tmp_path, READ_IN, READ_PAST)
    assert code == 1, text
    assert _memcheck_changes(findings) == [("invalid-global-read", "new")], text


def test_memcheck_the_bases_overrun_is_debt(tmp_path: Path) -> None:
    code, text, findings = _memcheck_gate(tmp_path, READ_PAST, READ_PAST)
    assert code == 0, text
    assert _memcheck_changes(findings) == [("invalid-global-read", "pre-existing")], text
    assert any(f["kind"] == "differential" and "0 new, 1 pre-existing" in f["message"] for f in findings), text
    assert "### Pre-existing failures" in text


def test_memcheck_a_fixed_overrun_is_reported(tmp_path: Path) -> None:
    code, text, findings = _memcheck_gate(tmp_path, READ_PAST, READ_IN)
    assert code == 0, text
    assert _memcheck_changes(findings) == [("invalid-global-read", "fixed")], text
