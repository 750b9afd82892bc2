"""A Triton repository with no compile settings, end to end through the CLI on a real git
repository: a kernel whose tl.constexpr has no default (as most real ones have: the wrapper
picks BLOCK from the size), a spec, and a correct change. The compile check reports the
kernel "not compiled: no values known" as a warning and does not block."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("triton")

KERNEL = '''\
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


def scale(x: torch.Tensor, alpha: float) -> torch.Tensor:
    if x.stride(-1) != 1:
        x = x.contiguous()
    rows, cols = x.shape
    out = torch.empty((rows, cols), dtype=x.dtype, device=x.device)
    _scale_kernel[(rows,)](x, out, cols, x.stride(0), alpha, BLOCK=triton.next_power_of_2(cols))
    return out
'''

SPEC = '''\
import gpu_gate as gg
from mylib.scale import scale


@gg.spec(dims={"rows": gg.Dim(1, 64), "cols": gg.Dim(1, 1024)},
         inputs={"x": gg.Tensor(("rows", "cols"), dtypes=["float32", "float16"])},
         params={"alpha": 0.5}, reference=lambda x, alpha: x * alpha)
def scale_gate(x, alpha):
    return scale(x, alpha)
'''

# The default policy, except what a run without a GPU needs: the GPU-only checks are "not run"
# there, which blocks by default (fail closed). Nothing about compiling is set.
CPU_POLICY = "version: 1\nextends: default\nnot_run: warn\nchecks:\n  equivalence: {cases: 8, shrink: false}\n"


def gate(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    return subprocess.run([sys.executable, "-m", "gpu_gate.cli", *args], cwd=cwd, capture_output=True, text=True,
                          env=env, timeout=900)


def _triton_repo(make_repo, policy: str | None):  # type: ignore[no-untyped-def]
    files = {"README.md": "x\n", "mylib/__init__.py": "", "mylib/scale.py": KERNEL, "gate/scale_gate.py": SPEC}
    if policy is not None:
        files[".gpu-gate.yml"] = policy
    r = make_repo("tlib", files)
    r.branch("feature")
    r.commit("a correct change", {"mylib/scale.py": KERNEL.replace("    row = tl.program_id(0)\n",
                                                                    "    row = tl.program_id(axis=0)\n")})
    return r


def _results(repo_path: Path) -> dict[str, dict[str, object]]:
    data = json.loads((repo_path / ".gpu-gate" / "out" / "results.json").read_text())
    return {r["check"]: r for r in data["results"]}


@pytest.mark.slow
def test_a_correct_change_to_a_triton_kernel_without_constexpr_defaults_is_green(make_repo) -> None:  # type: ignore[no-untyped-def]
    r = _triton_repo(make_repo, CPU_POLICY)
    p = gate("check", "--base", "main", "--cpu", cwd=r.path)
    assert p.returncode == 0, p.stdout + p.stderr
    compiled = _results(r.path)["compile"]
    assert compiled["status"] == "not_run", compiled  # nothing compiled is not passed (issue 40)
    assert compiled["reason"].startswith("0 of 1 Triton kernel(s) compiled")
    (f,) = compiled["findings"]
    assert f["kind"] == "not-compiled-no-values" and f["severity"] == "warning"
    assert "Triton kernel _scale_kernel: not compiled: no values known for constexpr BLOCK" in f["message"]
    assert _results(r.path)["equivalence"]["status"] == "passed"


@pytest.mark.slow
def test_with_no_policy_file_the_compile_check_is_not_what_blocks(make_repo) -> None:  # type: ignore[no-untyped-def]
    """With the default policy and no GPU, only the GPU-only checks fail closed (they were not
    run); the compile check of a kernel without constexpr values is a warning, not a block."""
    r = _triton_repo(make_repo, None)
    p = gate("check", "--base", "main", "--cpu", cwd=r.path)
    results = _results(r.path)
    assert results["compile"]["status"] == "not_run", p.stdout
    blocking = [line for line in p.stdout.splitlines() if "(blocks the merge)" in line]
    assert blocking and all("no GPU on this machine" in line for line in blocking), p.stdout
    assert not any(line.lstrip("- ").startswith("compile") for line in blocking)


@pytest.mark.slow
def test_a_compile_check_that_found_no_values_is_taken_from_the_cache(make_repo, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    """"0 of 1 compiled: no values known" is decided by the kernel's signature and the policy, which
    the job's key covers: a second gate of the same change takes it from the result cache instead of
    starting a worker to find the same nothing (on an H200 that was 18-20 s of every cache hit of a
    Liger gate). A not-run the machine decided (no GPU for memcheck here) is tried again (the twin)."""
    policy = CPU_POLICY.replace("  equivalence: {cases: 8, shrink: false}\n", "  equivalence: off\n  determinism: off\n")
    r = _triton_repo(make_repo, policy)
    cache = tmp_path / "cache"
    first = gate("check", "--base", "main", "--cpu", "--cache-dir", str(cache), cwd=r.path)
    assert first.returncode == 0, first.stdout + first.stderr
    assert _results(r.path)["compile"]["status"] == "not_run" and not _results(r.path)["compile"]["cached_from"]
    again = gate("check", "--base", "main", "--cpu", "--cache-dir", str(cache), cwd=r.path)
    assert again.returncode == 0, again.stdout + again.stderr
    results = _results(r.path)
    assert results["compile"]["status"] == "not_run" and results["compile"]["cached_from"], results["compile"]
    assert results["compile"]["reason"].startswith("0 of 1 Triton kernel(s) compiled")
    assert results["memcheck"]["status"] == "not_run" and not results["memcheck"]["cached_from"], results["memcheck"]


SRC_KERNEL = '''\
import triton
import triton.language as tl

from mylib.tiles import DEFAULT_BLOCK  # the package's own absolute import, as real libraries write it


@triton.jit
def _double_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr = DEFAULT_BLOCK):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=mask) * 2.0, mask=mask)
'''

SRC_POLICY = ("version: 1\npython_path: [src]\nuncovered: warn\nchecks:\n  equivalence: off\n  determinism: off\n"
              "  memcheck: off\n  racecheck: off\n  synccheck: off\n  initcheck: off\n")


@pytest.mark.slow
def test_a_src_layout_kernel_that_imports_its_own_package_compiles(make_repo) -> None:  # type: ignore[no-untyped-def]
    """The compile job imports a Triton kernel file the way the specs do, from the policy's
    python_path: ``src/mylib/ops.py`` is ``mylib.ops``, and its ``from mylib.tiles import ...`` works."""
    files = {".gpu-gate.yml": SRC_POLICY, "src/mylib/__init__.py": "", "src/mylib/tiles.py": "DEFAULT_BLOCK = 128\n",
             "src/mylib/ops.py": SRC_KERNEL}
    r = make_repo("srclib", files)
    r.branch("feature")
    r.commit("touch the kernel", {"src/mylib/ops.py": SRC_KERNEL.replace("mask=mask) * 2.0",
                                                                          "mask=mask) * 2")})
    p = gate("check", "--base", "main", "--cpu", cwd=r.path)
    compiled = _results(r.path)["compile"]
    kinds = [f["kind"] for f in compiled["findings"]]  # type: ignore[union-attr]
    assert "import-error" not in kinds, p.stdout + p.stderr
    assert compiled["status"] == "passed", p.stdout + p.stderr
