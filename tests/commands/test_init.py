"""`gpu-gate init` on real repositories: a valid starter policy, a spec skeleton that imports, is
found by `plan` and fails until it is filled in, `.gpu-gate/` in .gitignore, and no file
overwritten without --force."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from conftest_git import GitRepo

# A Liger-Kernel-shaped package: a src/ layout named by pyproject.toml, a Triton kernel and its wrapper.
PYPROJECT = """\
[project]
name = "mylib"
version = "0.1"

[tool.setuptools.packages.find]
where = ["src"]
"""

TRITON = """\
import torch
import triton
import triton.language as tl


@triton.jit
def _scale_kernel(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(y_ptr + offs, tl.load(x_ptr + offs, mask=mask) * 2.0, mask=mask)


def scale(x):
    x = x.contiguous()  # the kernel reads x as one flat run
    y = torch.empty_like(x)
    _scale_kernel[(triton.cdiv(x.numel(), 128),)](x, y, x.numel(), BLOCK=128)
    return y
"""

CUDA = 'extern "C" __global__ void scale(const float* x, float* y, int n) { int i = threadIdx.x; if (i < n) y[i] = 2 * x[i]; }\n'


def gate(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k not in ("GITHUB_ACTIONS", "GITHUB_EVENT_PATH")}
    return subprocess.run([sys.executable, "-m", "gpu_gate", *args], cwd=cwd, capture_output=True, text=True,
                          env=env, timeout=600)


def triton_repo(make_repo) -> GitRepo:  # type: ignore[no-untyped-def]
    return make_repo("lib", {"pyproject.toml": PYPROJECT, "src/mylib/__init__.py": "",
                             "src/mylib/ops/__init__.py": "from .scale import scale\n",
                             "src/mylib/ops/scale.py": TRITON})


def test_init_writes_a_valid_policy_a_skeleton_and_the_ignore_line(make_repo) -> None:  # type: ignore[no-untyped-def]
    r = triton_repo(make_repo)
    p = gate("init", cwd=r.path)
    assert p.returncode == 0, p.stdout + p.stderr
    assert p.stdout.splitlines()[:3] == [
        "wrote .gpu-gate.yml: the starter policy",
        "wrote gate/scale_gate.py: a spec skeleton for scale (src/mylib/ops/scale.py:13), which launches _scale_kernel; "
        "fill in its TODOs",
        "wrote .gitignore with .gpu-gate/"]
    assert (r.path / ".gitignore").read_text().splitlines()[-1] == ".gpu-gate/"
    strict = gate("validate-policy", "--strict", cwd=r.path)
    assert strict.returncode == 0, strict.stderr
    assert strict.stdout.startswith(".gpu-gate.yml: valid; checks: compile (required), equivalence (required)")
    assert "# " in (r.path / ".gpu-gate.yml").read_text()  # commented
    skeleton = (r.path / "gate" / "scale_gate.py").read_text()
    # the entry point, imported from its module (the package's re-export of the same name is not needed)
    assert "from mylib.ops.scale import scale\n" in skeleton and 'covers=["src/mylib/ops/scale.py"]' in skeleton
    assert "def scale_gate(x):\n    return scale(x)\n" in skeleton
    assert 'inputs={"x": gg.Tensor(("rows", "cols"), dtypes=["float32", "float16", "bfloat16"])}' in skeleton
    assert "grads=" not in skeleton  # a plain function with no backward
    assert skeleton.count("TODO(gpu-gate)") >= 4


def test_the_skeleton_imports_and_registers_one_spec(make_repo) -> None:  # type: ignore[no-untyped-def]
    r = triton_repo(make_repo)
    assert gate("init", cwd=r.path).returncode == 0
    # As the gate's worker imports it: the package directories first on sys.path (src, then the root).
    code = ("import sys, importlib.util; sys.path[:0] = ['src', '.']\n"
            "spec = importlib.util.spec_from_file_location('scale_gate', 'gate/scale_gate.py')\n"
            "m = importlib.util.module_from_spec(spec); sys.modules['scale_gate'] = m; spec.loader.exec_module(m)\n"
            "from gpu_gate.spec import specs_in_module\n"
            "print([s.name for s in specs_in_module('scale_gate')])")
    p = subprocess.run([sys.executable, "-c", code], cwd=r.path, capture_output=True, text=True)
    assert p.returncode == 0, p.stderr
    assert p.stdout.strip() == "['scale_gate']"


def fill_in(r: GitRepo) -> None:
    """The skeleton's TODOs, filled in as a user of the library would."""
    gate_file = r.path / "gate" / "scale_gate.py"
    text = gate_file.read_text()
    todo = 'raise NotImplementedError("TODO(gpu-gate): write the reference for scale in gate/scale_gate.py")'
    assert todo in text
    text = text.replace(todo, "return x * 2")
    # sizes the Triton interpreter runs quickly (one program per 128 elements)
    text = text.replace('"rows": gg.Dim(1, 4096), "cols": gg.Dim(1, 8192)', '"rows": gg.Dim(1, 16), "cols": gg.Dim(1, 512)')
    gate_file.write_text(text)


def test_plan_finds_the_skeleton_and_check_fails_until_it_is_filled_in(make_repo) -> None:  # type: ignore[no-untyped-def]
    r = triton_repo(make_repo)
    assert gate("init", cwd=r.path).returncode == 0
    r.commit("gpu-gate init")
    r.branch("feature")
    r.commit("faster", {"src/mylib/ops/scale.py": TRITON.replace("128", "256")})
    plan = json.loads(gate("plan", "--base", "main", cwd=r.path).stdout)
    assert plan["selected"] == {"gate/scale_gate.py::scale_gate": ["covers src/mylib/ops/scale.py (triton, "
                                                                     "modified)"]}
    p = gate("check", "--base", "main", "--cpu", "--no-cache", cwd=r.path)
    assert p.returncode == 1, p.stdout + p.stderr
    assert "equivalence gate/scale_gate.py::scale_gate" in p.stdout
    assert "NotImplementedError: TODO(gpu-gate): write the reference for scale in gate/scale_gate.py" in p.stdout


def test_the_filled_in_skeleton_passes(make_repo) -> None:  # type: ignore[no-untyped-def]
    """The skeleton failed for its TODOs alone: filled in on main, the same kernel change passes."""
    r = triton_repo(make_repo)
    assert gate("init", cwd=r.path).returncode == 0
    fill_in(r)
    r.commit("gate spec for scale")
    r.branch("feature")
    r.commit("faster", {"src/mylib/ops/scale.py": TRITON.replace("128", "256")})
    p = gate("check", "--base", "main", "--cpu", "--no-cache", cwd=r.path)
    assert "PASS    equivalence gate/scale_gate.py::scale_gate" in p.stdout, p.stdout + p.stderr


def test_init_twice_changes_nothing_and_force_overwrites(make_repo) -> None:  # type: ignore[no-untyped-def]
    r = triton_repo(make_repo)
    r.write(".gitignore", "build/")  # no newline at the end
    assert gate("init", cwd=r.path).returncode == 0
    assert (r.path / ".gitignore").read_text() == "build/\n# gpu-gate's reports and result cache\n.gpu-gate/\n"
    before = {p: p.read_text() for p in (r.path / ".gpu-gate.yml", r.path / ".gitignore",
                                         r.path / "gate" / "scale_gate.py")}
    (r.path / ".gpu-gate.yml").write_text(before[r.path / ".gpu-gate.yml"] + "# my edit\n")
    again = gate("init", cwd=r.path)
    assert again.returncode == 0
    assert "kept .gpu-gate.yml: it exists (--force overwrites it)" in again.stdout
    assert "kept .gitignore: it already ignores .gpu-gate/" in again.stdout
    assert (r.path / ".gpu-gate.yml").read_text().endswith("# my edit\n")
    assert (r.path / ".gitignore").read_text() == before[r.path / ".gitignore"]
    forced = gate("init", "--force", "--kernel", "src/mylib/ops/scale.py", cwd=r.path)
    assert "overwrote .gpu-gate.yml" in forced.stdout and "overwrote gate/scale_gate.py" in forced.stdout
    assert (r.path / ".gpu-gate.yml").read_text() == before[r.path / ".gpu-gate.yml"]


def test_an_existing_spec_file_is_kept(make_repo) -> None:  # type: ignore[no-untyped-def]
    r = triton_repo(make_repo)
    r.write("gate/scale_gate.py", "# mine\n")  # not a spec: the kernel is still uncovered
    p = gate("init", cwd=r.path)
    assert "kept gate/scale_gate.py: it exists (--force overwrites it)" in p.stdout
    assert (r.path / "gate" / "scale_gate.py").read_text() == "# mine\n"


def test_specs_dir_and_a_cuda_kernel(make_repo) -> None:  # type: ignore[no-untyped-def]
    r = make_repo("cu", {"csrc/scale.cu": CUDA})
    p = gate("init", "--specs-dir", "tests/gate", cwd=r.path)
    assert p.returncode == 0, p.stderr
    assert 'specs: ["tests/gate/**/*_gate.py"]' in (r.path / ".gpu-gate.yml").read_text()
    skeleton = (r.path / "tests" / "gate" / "scale_gate.py").read_text()
    assert 'gg.cuda.load("csrc/scale.cu", "scale")' in skeleton and 'covers=["csrc/scale.cu"]' in skeleton
    r.commit("init")
    r.branch("feature")
    r.commit("edit", {"csrc/scale.cu": CUDA.replace("2 * x[i]", "x[i] + x[i]")})
    plan = json.loads(gate("plan", "--base", "main", cwd=r.path).stdout)
    assert "equivalence:tests/gate/scale_gate.py::scale_gate" in [j["id"] for j in plan["jobs"]]
    assert gate("init", "--specs-dir", "../elsewhere", cwd=r.path).returncode == 2


def test_a_kept_policy_that_would_not_find_the_skeleton_is_said(make_repo) -> None:  # type: ignore[no-untyped-def]
    r = triton_repo(make_repo)
    r.write(".gpu-gate.yml", 'version: 1\nspecs: ["checks/**/*_gate.py"]\n')
    p = gate("init", cwd=r.path)
    assert p.returncode == 0
    assert ("gate/scale_gate.py is not matched by the policy's specs globs (checks/**/*_gate.py): plan will not "
            "find it") in p.stderr


def test_no_kernel_no_repository_and_a_wrong_kernel(make_repo, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    r = make_repo("plain", {"README.md": "x\n", "tools/util.py": "def f():\n    return 1\n"})
    p = gate("init", cwd=r.path)
    assert p.returncode == 0
    assert "no kernel found in this repository: no spec skeleton written" in p.stdout
    assert (r.path / ".gpu-gate.yml").is_file() and not (r.path / "gate").exists()
    wrong = gate("init", "--kernel", "tools/util.py", cwd=r.path)
    assert wrong.returncode == 2 and "--kernel tools/util.py: no kernel found in that file" in wrong.stderr
    outside = tmp_path / "not-a-repo"
    outside.mkdir()
    nogit = gate("init", cwd=outside)
    assert nogit.returncode == 2 and nogit.stderr.startswith("gpu-gate: error: not a git repository")
    assert not (outside / ".gpu-gate.yml").exists()


def test_a_library_shaped_like_flash_attention_gets_its_own_kernel_and_no_test_kernels(make_repo) -> None:  # type: ignore[no-untyped-def]
    """A scratch script at a directory that sorts first, a C++ header kernel, a package Triton kernel
    and kernels that only the tests use: the skeleton is for the package's Triton kernel, and the
    starter policy leaves the tests' kernels out, so a change to them is not an uncovered kernel."""
    r = make_repo("fa", {"AI/repro_scratch.py": TRITON, "csrc/norm/ln_kernels.cuh": CUDA,
                         "fa_lib/__init__.py": "", "fa_lib/ops/__init__.py": "", "fa_lib/ops/rotary.py": TRITON,
                         "tests/ops/test_rotary.py": TRITON, "benchmarks/bench_rotary.py": TRITON})
    p = gate("init", cwd=r.path)
    assert p.returncode == 0, p.stdout + p.stderr
    assert "writing a skeleton for fa_lib/ops/rotary.py" in p.stdout, p.stdout
    assert "3 kernel files found, 3 not covered by a spec" in p.stdout, p.stdout
    policy = (r.path / ".gpu-gate.yml").read_text()
    assert 'exclude: ["third_party/**", "benchmarks/**", "tests/**"]' in policy, policy
    assert gate("validate-policy", "--strict", cwd=r.path).returncode == 0
    r.commit("init")
    r.branch("feature")
    r.commit("edit the tests' kernel", {"tests/ops/test_rotary.py": TRITON.replace("* 2.0", "* 3.0")})
    plan = json.loads(gate("plan", "--base", "main", cwd=r.path).stdout)
    assert plan["kernels"] == [] and not [f for f in plan.get("findings", []) if f["kind"] == "uncovered"], plan
