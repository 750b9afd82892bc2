"""A machine without torch or Triton: `demo`, `check` and `pytest --gpu-gate` each say, in one line, which of
gpu-gate's extras to install, instead of failing deep inside a job.

The interpreter runs with a ``sitecustomize`` that plants the hidden modules as ``None`` in
``sys.modules``, which is how Python says "this module cannot be imported" (``import torch`` raises
ModuleNotFoundError): the rest of the environment stays as it is.
"""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from conftest_git import GitRepo

HIDE = """import os
import sys

for name in filter(None, os.environ.get("GG_TEST_HIDE", "").split(",")):
    sys.modules[name] = None  # import name -> ModuleNotFoundError, find_spec(name) -> None
"""


def run(args: list[str], cwd: Path, hide: str, tmp_path: Path, module: str = "gpu_gate"
        ) -> subprocess.CompletedProcess[str]:
    site = tmp_path / "hide-site"
    site.mkdir(exist_ok=True)
    (site / "sitecustomize.py").write_text(HIDE)
    paths = [str(site), *([str(cwd)] if module == "pytest" else [])]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(paths), "GG_TEST_HIDE": hide, "CUDA_VISIBLE_DEVICES": ""}
    return subprocess.run([sys.executable, "-m", module, *args], cwd=cwd, capture_output=True, text=True, env=env,
                          timeout=600)


def test_the_blocker_hides_what_it_names(tmp_path: Path) -> None:
    res = run(["-c", "pass"], tmp_path, "torch", tmp_path, module="gpu_gate")  # argparse error, harmless
    probe = subprocess.run([sys.executable, "-c", "import torch"], env={**os.environ, "GG_TEST_HIDE": "torch",
                           "PYTHONPATH": str(tmp_path / "hide-site")}, capture_output=True, text=True)
    assert res.returncode == 2 and "ModuleNotFoundError" in probe.stderr, "torch must be out of reach"


@pytest.mark.parametrize("hide, extra, what", [("torch,triton", "cpu", "torch and triton"), ("triton", "triton", "triton"),
                                               ("torch", "cpu", "torch")])
def test_demo_names_the_extra_in_one_line_and_writes_nothing(hide: str, extra: str, what: str, tmp_path: Path) -> None:
    res = run(["demo", "--out", "demo"], tmp_path, hide, tmp_path)
    assert res.returncode == 2 and res.stdout == ""
    assert res.stderr.splitlines() == [
        f"gpu-gate: error: gpu-gate demo needs {what}, which {sys.executable} cannot import: install gpu-gate with the "
        f"`{extra}` extra (pip install 'gpu-kernel-gate[{extra}]', or '.[{extra}]' in a checkout of gpu-gate; "
        + ("`cpu` brings torch and Triton together)" if extra == "triton" else
           "on a GPU runner `gpu-cu13` or `gpu-cu12`, after the CUDA build of torch)")]
    assert not (tmp_path / "demo").exists()


SPEC = """import gpu_gate as gg
from mylib.ops import double


@gg.spec(dims={"n": gg.Dim(1, 64)}, inputs={"x": gg.Tensor(("n",), dtypes=["float32"])}, reference=lambda x: x * 2)
def double_gate(x):
    return double(x)
"""
TRITON_OPS = """import triton
import triton.language as tl


@triton.jit
def _double(x_ptr, n, BLOCK: tl.constexpr):
    i = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(x_ptr + i, tl.load(x_ptr + i, mask=i < n) * 2, mask=i < n)


def double(x):
    return x * 2
"""
POLICY = "version: 1\nspecs: [\"gate/**/*_gate.py\"]\n"


def library(make_repo, ops: str) -> GitRepo:  # type: ignore[no-untyped-def]
    r: GitRepo = make_repo("lib", {".gpu-gate.yml": POLICY, "mylib/__init__.py": "", "gate/__init__.py": "",
                                   "mylib/ops.py": "def double(x):\n    return x * 2\n", "gate/ops_gate.py": SPEC})
    r.branch("feature")
    r.commit("ops", {"mylib/ops.py": ops})
    return r


def test_check_names_the_extra_before_any_job(make_repo, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    r = library(make_repo, "def double(x):\n    return x + x\n")
    res = run(["check", "--base", "main", "--cpu", "--no-cache"], r.path, "torch", tmp_path)
    assert res.returncode == 2, res.stdout + res.stderr
    assert res.stderr.splitlines() == [
        f"gpu-gate: error: gpu-gate check needs torch, which {sys.executable} cannot import: install gpu-gate with the "
        f"`cpu` extra (pip install 'gpu-kernel-gate[cpu]', or '.[cpu]' in a checkout of gpu-gate; on a GPU runner "
        f"`gpu-cu13` or `gpu-cu12`, after the CUDA build of torch)"]
    assert "running" not in res.stdout, "no job may start"
    plan = run(["plan", "--base", "main"], r.path, "torch", tmp_path)
    assert plan.returncode == 0, "planning needs no torch"


def test_check_of_a_triton_kernel_names_the_triton_extra(make_repo, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    r = library(make_repo, TRITON_OPS)
    res = run(["check", "--base", "main", "--cpu", "--no-cache"], r.path, "triton", tmp_path)
    assert res.returncode == 2
    (line,) = res.stderr.splitlines()
    assert line.startswith("gpu-gate: error: gpu-gate check needs triton, which ") and "`triton` extra" in line


def test_pytest_plugin_names_the_extra_for_torch(make_repo, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    r = library(make_repo, "def double(x):\n    return x * 2\n")
    res = run(["-p", "no:cacheprovider", "--gpu-gate", "gate"], r.path, "torch", tmp_path, module="pytest")
    assert res.returncode == 4, res.stdout + res.stderr  # pytest's usage error
    assert (f"ERROR: pytest --gpu-gate needs torch, which {sys.executable} cannot import: install gpu-gate with the "
            f"`cpu` extra") in res.stderr


def test_pytest_plugin_names_the_extra_for_a_spec_whose_kernels_need_triton(make_repo, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    r = library(make_repo, TRITON_OPS)
    res = run(["-p", "no:cacheprovider", "-rA", "--gpu-gate", "gate"], r.path, "triton", tmp_path, module="pytest")
    out = res.stdout + res.stderr
    assert res.returncode == 1, out
    assert (f"double_gate needs triton, which {sys.executable} cannot import: install gpu-gate with the `triton` "
            f"extra") in out
    assert "Traceback" not in out, "one line, not a traceback"
