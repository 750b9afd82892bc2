"""A 32-bit offset in a pull request, end to end through the CLI on a real git repository: the
compile check builds the base's kernel file too, and only what the change brings blocks.

- the bug brought back (``tl.program_id(0).to(tl.int64)`` made ``tl.program_id(0)`` again, as in
  Liger-Kernel #804 reverted): new, blocks;
- a change that computes nothing new in a kernel that has always computed its offsets in 32 bits: the same
  findings at the base, the repository's debt, a warning;
- the fix: reported fixed, green.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("triton")

from test_compile_triton_gate import KERNEL as TRITON_KERNEL  # noqa: E402  (tests/ is on sys.path)

# The row-scaling kernel of the Triton end-to-end test, its program index written as ROW here.
KERNEL = TRITON_KERNEL.replace("    row = tl.program_id(0)\n", "    row = ROW\n")
assert "ROW" in KERNEL
NARROW, WIDE = "tl.program_id(0)", "tl.program_id(0).to(tl.int64)"

SPEC = '''\
import gpu_gate as gg
from mylib.scale import scale


@gg.spec(dims={"rows": gg.Dim(1, 64), "cols": gg.Dim(1, 1024)},
         inputs={"x": gg.Tensor(("rows", "cols"), dtypes=["float32"])},
         params={"alpha": 0.5}, reference=lambda x, alpha: x * alpha)
def scale_gate(x, alpha):
    return scale(x, alpha)
'''

# What a run without a GPU needs (the GPU-only checks are "not run" there), the kernel's values
# for the compile check, and no equivalence run: this file is about the compile check.
POLICY = """\
version: 1
extends: default
not_run: warn
checks:
  equivalence: off
  determinism: off
  compile:
    triton:
      _scale_kernel:
        signature: {x_ptr: "*fp32", out_ptr: "*fp32", n_cols: i32, stride: i32, alpha: fp32}
        constexprs: {BLOCK: 1024}
      _shift_kernel:
        signature: {x_ptr: "*fp32", out_ptr: "*fp32", n_cols: i32, stride: i32}
        constexprs: {BLOCK: 1024}
"""

# A second kernel, new in the change, in the same file: it has no base.
SHIFT = '''

@triton.jit
def _shift_kernel(x_ptr, out_ptr, n_cols, stride, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK)
    mask = cols < n_cols
    tl.store(out_ptr + row * stride + cols, tl.load(x_ptr + row * stride + cols, mask=mask) + 1.0, mask=mask)
'''


def gate(cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    return subprocess.run([sys.executable, "-m", "gpu_gate.cli", "check", "--base", "main", "--cpu"], cwd=cwd,
                          capture_output=True, text=True, env=env, timeout=900)


def _repo(make_repo, base_row: str, head_row: str, comment: bool = False,  # type: ignore[no-untyped-def]
          added: str = ""):
    r = make_repo("lib", {"mylib/__init__.py": "", "mylib/scale.py": KERNEL.replace("ROW", base_row),
                          "gate/scale_gate.py": SPEC, ".gpu-gate.yml": POLICY})
    r.branch("feature")
    head = KERNEL.replace("ROW", head_row)
    if comment:
        # a line that changes a token and nothing the kernel computes (a comment alone is no change)
        head = head.replace("    cols = tl.arange", "    pass  # one program per row\n    cols = tl.arange")
    r.commit("the change", {"mylib/scale.py": head + added})
    return r


def _compile(repo: Path) -> dict[str, object]:
    data = json.loads((repo / ".gpu-gate" / "out" / "results.json").read_text())
    return next(r for r in data["results"] if r["check"] == "compile")


def _offsets(result: dict[str, object]) -> list[tuple[object, ...]]:
    return sorted((f["line"], f["severity"], f["details"].get("change"))  # type: ignore[index]
                  for f in result["findings"] if f["kind"] == "int32-offset")  # type: ignore[union-attr]


@pytest.mark.slow
def test_a_change_that_brings_a_32_bit_offset_back_blocks(make_repo) -> None:  # type: ignore[no-untyped-def]
    r = _repo(make_repo, WIDE, NARROW)
    p = gate(r.path)
    compiled = _compile(r.path)
    assert _offsets(compiled) == [(11, "error", "new"), (12, "error", "new")], compiled["findings"]
    assert p.returncode == 1 and "new in this change" in p.stdout, p.stdout + p.stderr
    assert compiled["status"] == "failed"
    report = (r.path / ".gpu-gate" / "out" / "report.md").read_text()
    assert "**compile** (new: the base's build does not have it)" in report
    assert "the base's code passes this case" not in report  # that is said of cases, not builds


@pytest.mark.slow
def test_offsets_the_base_computes_in_32_bits_too_are_debt_not_this_changes(make_repo) -> None:  # type: ignore[no-untyped-def]
    r = _repo(make_repo, NARROW, NARROW, comment=True)
    p = gate(r.path)
    compiled = _compile(r.path)
    assert _offsets(compiled) == [(12, "warning", "pre-existing"), (13, "warning", "pre-existing")], \
        compiled["findings"]
    assert p.returncode == 0, p.stdout + p.stderr
    note = next(f for f in compiled["findings"] if f["kind"] == "differential")  # type: ignore[union-attr]
    assert "0 new, 2 pre-existing and 0 fixed" in note["message"]


@pytest.mark.slow
def test_the_fix_is_reported_fixed_and_is_green(make_repo) -> None:  # type: ignore[no-untyped-def]
    r = _repo(make_repo, NARROW, WIDE)
    p = gate(r.path)
    compiled = _compile(r.path)
    assert _offsets(compiled) == [(11, "note", "fixed")], compiled["findings"]
    assert "has 2 of these, the head's 0" in str(compiled["findings"])
    assert p.returncode == 0, p.stdout + p.stderr


@pytest.mark.slow
def test_a_new_kernel_in_an_existing_file_has_no_base_and_is_judged_by_absolute_rules(make_repo) -> None:  # type: ignore[no-untyped-def]
    """New kernels have no base: a 32-bit offset in one is a warning, as in a new file, even though
    the file it is added to is compared with the base's build."""
    r = _repo(make_repo, WIDE, WIDE, added=SHIFT)
    p = gate(r.path)
    compiled = _compile(r.path)
    shifted = [(f["details"]["kernel"], f["severity"], f["details"].get("change"))  # type: ignore[index]
               for f in compiled["findings"] if f["kind"] == "int32-offset"]  # type: ignore[union-attr]
    assert shifted and set(shifted) == {("_shift_kernel", "warning", None)}, compiled["findings"]
    assert p.returncode == 0, p.stdout + p.stderr
    note = next(f for f in compiled["findings"] if f["kind"] == "differential")  # type: ignore[union-attr]
    assert note["message"].endswith("has no such kernel or could not build it: _shift_kernel")


def test_only_a_kernel_file_the_base_has_is_compiled_at_the_base_too(make_repo) -> None:  # type: ignore[no-untyped-def]
    """The plan: a new kernel file's compile job has no base to compare with."""
    r = make_repo("lib", {"mylib/__init__.py": "", "mylib/scale.py": KERNEL.replace("ROW", WIDE),
                          "gate/scale_gate.py": SPEC, ".gpu-gate.yml": POLICY})
    r.branch("feature")
    r.commit("a change and a new file", {"mylib/scale.py": KERNEL.replace("ROW", NARROW),
                                         "mylib/shift.py": "import triton\nimport triton.language as tl\n" + SHIFT,
                                         "gate/shift_gate.py": SPEC.replace("scale_gate", "shift_gate")
                                         .replace("from mylib.scale import scale", "import mylib.shift\nfrom mylib.scale import scale")})
    p = subprocess.run([sys.executable, "-m", "gpu_gate.cli", "plan", "--base", "main"], cwd=r.path,
                       capture_output=True, text=True, timeout=300)
    compiles = {j["kernels"][0]: "base_commit" in j["options"]
                for j in json.loads(p.stdout)["jobs"] if j["check"] == "compile"}
    assert compiles == {"mylib/scale.py": True, "mylib/shift.py": False}, p.stdout[-2000:] + p.stderr
