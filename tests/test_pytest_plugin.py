"""`pytest --gpu-gate` and `gg.check()`: a library's suite runs its gate specs with the gate's engine.

Run as a user would: pytest in a subprocess, in a repository with a policy, specs and tests of its own.
"""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

POLICY = """\
version: 1
specs: ["gate/**/*_gate.py"]
checks:
  equivalence: {cases: 8, growth: false, shrink: false}
"""

OPS = """\
def double(x):
    return x * 2


def double_long_rows_wrong(x):
    return x * 2 if x.shape[-1] <= 64 else x * 2.5
"""

SPECS = """\
import gpu_gate as gg
from mylib.ops import double, double_long_rows_wrong

DIMS = {"rows": gg.Dim(1, 16), "n": gg.Dim(1, 300)}
X = {"x": gg.Tensor(("rows", "n"), dtypes=["float32"])}


@gg.spec(dims=DIMS, inputs=X, reference=lambda x: x * 2)
def double_gate(x):
    return double(x)


@gg.spec(dims=DIMS, inputs=X, reference=lambda x: x * 2)
def double_wrong_gate(x):
    return double_long_rows_wrong(x)


@gg.spec(dims=DIMS, inputs=X, reference=lambda x: x * 2, devices=["cuda"])
def double_on_gpu_gate(x):
    return double(x)
"""

TESTS = """\
import pytest
import gpu_gate as gg
from gpu_gate.testing import GateCheckFailed

from gate.ops_gate import double_gate, double_wrong_gate


def test_the_kernel_passes_its_gate():
    (result,) = gg.check(double_gate)
    assert result.status.value == "passed" and result.cases == 8


def test_the_wrong_kernel_fails_its_gate():
    with pytest.raises(GateCheckFailed, match="mismatch") as err:
        gg.check(double_wrong_gate)
    assert "gpu-gate repro gate/ops_gate.py::double_wrong_gate" in str(err.value)
"""


def _repo(tmp_path: Path) -> Path:
    root = tmp_path / "lib"
    for rel, text in {".gpu-gate.yml": POLICY, "mylib/__init__.py": "", "mylib/ops.py": OPS,
                      "gate/__init__.py": "", "gate/ops_gate.py": SPECS, "tests/test_lib.py": TESTS}.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text)
    subprocess.run(["git", "init", "-q"], cwd=root, check=True)
    return root


def _pytest(root: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-rA", *args], cwd=root,
                          capture_output=True, text=True, timeout=600, env=_env(root))


def _env(root: Path) -> dict[str, str]:
    import os

    return {**os.environ, "PYTHONPATH": str(root), "CUDA_VISIBLE_DEVICES": ""}


def test_gate_specs_run_as_tests_with_the_policys_settings(tmp_path: Path) -> None:
    root = _repo(tmp_path)
    p = _pytest(root, "--gpu-gate", "gate")
    out = p.stdout + p.stderr
    assert p.returncode == 1, out
    assert "PASSED gate/ops_gate.py::double_gate[equivalence]" in out
    assert "FAILED gate/ops_gate.py::double_wrong_gate[equivalence]" in out
    assert "SKIPPED" in out and "runs only on cuda" in out
    # the failure says what the gate would say, with the command that reproduces it
    assert "mismatch (case c0" in out and "gpu-gate repro gate/ops_gate.py::double_wrong_gate" in out


def test_without_the_option_the_suite_is_unchanged(tmp_path: Path) -> None:
    root = _repo(tmp_path)
    p = _pytest(root)
    out = p.stdout + p.stderr
    assert p.returncode == 0, out
    assert "2 passed" in out and "ops_gate" not in out  # gg.check() from the library's tests, no spec items


def test_only_in_process_checks_can_be_asked_for(tmp_path: Path) -> None:
    root = _repo(tmp_path)
    p = _pytest(root, "--gpu-gate", "--gpu-gate-checks", "memcheck", "gate")
    assert p.returncode != 0
    assert "--gpu-gate-checks: memcheck cannot run inside pytest" in p.stdout + p.stderr


def test_determinism_runs_too_when_asked(tmp_path: Path) -> None:
    root = _repo(tmp_path)
    p = _pytest(root, "--gpu-gate", "--gpu-gate-checks", "equivalence,determinism", "--gpu-gate-cases", "4",
                "gate/ops_gate.py::double_gate[determinism]", "gate/ops_gate.py::double_on_gpu_gate[determinism]")
    out = p.stdout + p.stderr
    assert p.returncode == 0, out
    assert "PASSED gate/ops_gate.py::double_gate[determinism]" in out, out
    assert "SKIPPED [1] gate/ops_gate.py:" in out and "determinism not run" in out, out


def test_without_a_gpu_triton_kernels_run_under_the_interpreter_unasked(tmp_path: Path) -> None:
    """No GPU and no TRITON_INTERPRET in the environment: the plugin chooses Triton's interpreter before
    the first conftest imports the library (without it every launch fails: "0 active drivers")."""
    import os
    import shutil

    root = tmp_path / "normkit"
    shutil.copytree(Path(__file__).parent / "interp_shaped", root)
    (root / "conftest.py").write_text("import normkit.softmax  # the library's kernels are defined here\n")
    subprocess.run(["git", "init", "-q"], cwd=root, check=True)
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    env.update({"PYTHONPATH": str(root / "src"), "CUDA_VISIBLE_DEVICES": ""})
    p = subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-rA", "--gpu-gate",
                        "--gpu-gate-cases", "3", "gate/scaled_softmax_gate.py"], cwd=root, capture_output=True,
                       text=True, timeout=900, env=env)
    out = p.stdout + p.stderr
    assert p.returncode == 0, out
    assert "gpu-gate: no GPU here: Triton kernels run under Triton's interpreter (TRITON_INTERPRET=1)" in out
    assert "PASSED gate/scaled_softmax_gate.py::scaled_softmax_gate[equivalence]" in out
