"""A shrunk failing case comes with a one-line reproducer, and running that exact line with
the real ``gpu-gate repro`` CLI in the repository reproduces the failure; once the kernel
is fixed, the same line passes."""
from __future__ import annotations

import os
import shlex
import subprocess
import sys
from pathlib import Path

from gpu_gate.findings import Severity, Status
from gpu_gate.inprocess import Context
from gpu_gate.judge.job import run_job
from gpu_gate.protocol.jobs import Job, SpecRef

POLICY = """version: 1
kernels: {include: ["kernels/**/*.py"]}
specs: ["gate/**/*_gate.py"]
checks:
  equivalence: {cases: 16, seed: 5, shrink_budget_s: 60}
"""

KERNEL = '''import torch


def layernorm(x: torch.Tensor) -> torch.Tensor:
    rows, n = x.shape
    block = 1 << max(0, (n - 1).bit_length())
    lanes = torch.zeros((rows, block), dtype=torch.float32)
    lanes[:, :n] = x.float()
    mean = lanes.sum(-1, keepdim=True) / n
    centered = lanes - mean
    {fix}
    var = (centered * centered).sum(-1, keepdim=True) / n
    return ((lanes[:, :n] - mean) * torch.rsqrt(var + 1e-5)).to(x.dtype)
'''

GATE = '''import torch

import gpu_gate as gg
from kernels.layernorm import layernorm


@gg.spec(dims={"rows": gg.Dim(1, 64), "cols": gg.Dim(1, 4096)},
         inputs={"x": gg.Tensor(("rows", "cols"), dtypes=["float32"])},
         reference=lambda x: torch.nn.functional.layer_norm(x, x.shape[-1:], eps=1e-5))
def ln_gate(x):
    return layernorm(x)
'''


def _cli(repro: str, repo: Path) -> subprocess.CompletedProcess[str]:
    argv = shlex.split(repro)
    assert argv[:2] == ["gpu-gate", "repro"]
    exe = Path(sys.executable).parent / "gpu-gate"
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    return subprocess.run([str(exe), *argv[1:], "--cpu"], cwd=repo, env=env, capture_output=True, text=True,
                          timeout=300, check=False)


def test_the_shrunk_case_reproduces_with_the_repro_command(repo, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    repo.commit("layer norm kernel", {".gpu-gate.yml": POLICY, "kernels/__init__.py": "",
                                      "kernels/layernorm.py": KERNEL.format(fix="pass"),
                                      "gate/ln_gate.py": GATE})
    job = Job(id="equivalence:gate/ln_gate.py::ln_gate", check="equivalence", level="required", kernels=(),
              spec=SpecRef("gate/ln_gate.py", "ln_gate"),
              options={"cases": 16, "seed": 5, "shrink": True, "shrink_budget_s": 60}, seed=5)
    r = run_job(job, Context(repo_root=repo.path, device="cpu", workdir=tmp_path))
    assert r.status is Status.FAILED
    (f,) = [x for x in r.findings if x.severity is Severity.ERROR and x.kind == "mismatch"]
    assert "shrunk from" in f.message and f.case and f.case.endswith("s") and f.repro
    shrunk = f.message.rsplit(" to ", 1)[1]
    rows = int(shrunk.split("rows=")[1].split("]")[0].split(",")[0])
    cols = int(shrunk.split("cols=")[1].split("]")[0].split(",")[0])
    assert rows * cols < 64 * 97, f"the case did not shrink: {shrunk}"

    failing = _cli(f.repro, repo.path)
    assert failing.returncode == 1, failing.stdout + failing.stderr
    assert "mismatch" in failing.stdout and "FAIL" in failing.stdout.upper()
    assert f"shape ({rows}, {cols})" in failing.stdout, failing.stdout

    repo.commit("mask the padding lanes", {"kernels/layernorm.py": KERNEL.format(fix="centered[:, n:] = 0")})
    fixed = _cli(f.repro, repo.path)
    assert fixed.returncode == 0, fixed.stdout + fixed.stderr
    assert "mismatch" not in fixed.stdout


ROWSUM_KERNEL = '''import torch


def rowsum(x: torch.Tensor) -> torch.Tensor:
    rows, n = x.shape
    nb = max(1, -(-n // 128))
    padded = torch.zeros((rows, nb * 128), dtype=torch.float32)
    padded[:, :n] = x.float()
    parts = padded.view(rows, nb, 128).sum(-1)
    acc = torch.zeros(rows, dtype={acc})
    for j in range(nb):
        acc = (acc.float() + parts[:, j]).to({acc})
    return acc.to(torch.bfloat16)
'''

ROWSUM_GATE = '''import gpu_gate as gg
from kernels.rowsum import rowsum


@gg.spec(dims={"rows": gg.Dim(1, 8), "n": gg.Dim(1, 1 << 18, reduction=True)},
         inputs={"x": gg.Tensor(("rows", "n"), dtypes=["bfloat16"])}, reference=lambda x: x.sum(-1))
def rowsum_gate(x):
    return rowsum(x)
'''


def test_an_error_growth_finding_reproduces_its_sweep(repo, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    """Error growth is a property of a curve, not of one case: its repro command re-runs the
    sweep (same dim, dtype and seed) and fails the same way; with an fp32 accumulator it passes."""
    repo.commit("row sum", {".gpu-gate.yml": POLICY, "kernels/__init__.py": "",
                            "kernels/rowsum.py": ROWSUM_KERNEL.format(acc="torch.bfloat16"),
                            "gate/rowsum_gate.py": ROWSUM_GATE})
    job = Job(id="equivalence:gate/rowsum_gate.py::rowsum_gate", check="equivalence", level="required",
              kernels=(), spec=SpecRef("gate/rowsum_gate.py", "rowsum_gate"),
              options={"cases": 4, "seed": 3, "shrink": False}, seed=3)
    r = run_job(job, Context(repo_root=repo.path, device="cpu", workdir=tmp_path))
    (f,) = [x for x in r.findings if x.kind == "error-growth"]
    assert f.repro == "gpu-gate repro gate/rowsum_gate.py::rowsum_gate --check equivalence --growth n:bfloat16 --seed 3"

    failing = _cli(f.repro, repo.path)
    assert failing.returncode == 1, failing.stdout + failing.stderr
    assert "error-growth" in failing.stdout and "error by length along 'n' in bfloat16" in failing.stdout
    assert "262144" in failing.stdout, failing.stdout

    repo.commit("fp32 accumulator", {"kernels/rowsum.py": ROWSUM_KERNEL.format(acc="torch.float32")})
    fixed = _cli(f.repro, repo.path)
    assert fixed.returncode == 0, fixed.stdout + fixed.stderr
    assert "error-growth" not in fixed.stdout and "error by length" in fixed.stdout

    wrong = _cli("gpu-gate repro gate/rowsum_gate.py::rowsum_gate --growth rows:bfloat16", repo.path)
    assert wrong.returncode != 0 and "no sweep for 'rows:bfloat16'" in wrong.stdout + wrong.stderr


# --- on a pull request the repro judges by the base's spec, as the gate did ---------------------------

PR_POLICY = """version: 1
kernels: {include: ["kernels/**/*.py"]}
specs: ["gate/**/*_gate.py"]
checks:
  equivalence: {cases: 8, seed: 5, growth: false, shrink: false}
  compile: off
"""

SCALE = "def scale(x):\n    return x * {factor}\n"

SCALE_GATE = '''import torch

import gpu_gate as gg
from kernels.scale import scale


@gg.spec(dims={{"n": gg.Dim(1, 256)}}, inputs={{"x": gg.Tensor(("n",), dtypes=["float32"])}},
         reference=lambda x: x * {factor}, devices=["cuda", "cpu"])
def scale_gate(x):
    return scale(x)
'''


def test_the_repro_of_a_pull_request_judges_by_the_bases_spec(make_repo) -> None:  # type: ignore[no-untyped-def]
    """The change breaks the kernel and rewrites the spec's reference to match: the gate judges by
    the base's spec and fails; the repro line it prints names the base and fails the same way. The
    work tree's spec alone would pass it."""
    import json

    r = make_repo("proj", {".gpu-gate.yml": PR_POLICY, "kernels/__init__.py": "",
                           "kernels/scale.py": SCALE.format(factor=2), "gate/scale_gate.py": SCALE_GATE.format(factor=2)})
    r.branch("feature")
    r.commit("scale by 3", {"kernels/scale.py": SCALE.format(factor=3), "gate/scale_gate.py": SCALE_GATE.format(factor=3)})
    exe = Path(sys.executable).parent / "gpu-gate"
    gate = subprocess.run([str(exe), "check", "--base", "main", "--cpu", "--no-cache"], cwd=r.path,
                          capture_output=True, text=True, timeout=600)
    assert gate.returncode == 1, gate.stdout + gate.stderr
    results = json.loads((r.path / ".gpu-gate" / "out" / "results.json").read_text())["results"]
    (eq,) = [x for x in results if x["check"] == "equivalence"]
    (mismatch,) = [f for f in eq["findings"] if f["kind"] == "mismatch"]
    base = r.git("rev-parse", "main")
    assert f"--base {base[:12]}" in mismatch["repro"]
    again = _cli(mismatch["repro"], r.path)
    assert again.returncode == 1 and "mismatch" in again.stdout, again.stdout + again.stderr
    head_only = _cli(mismatch["repro"].replace(f" --base {base[:12]}", ""), r.path)
    assert head_only.returncode == 0, head_only.stdout + head_only.stderr


SRC_GATE = '''import torch

import gpu_gate as gg
from mylib.scale import scale


@gg.spec(dims={"n": gg.Dim(1, 256)}, inputs={"x": gg.Tensor(("n",), dtypes=["float32"])},
         reference=lambda x: x * 2)
def scale_gate(x):
    return scale(x)
'''


def test_repro_imports_the_spec_from_the_policys_python_path(repo) -> None:  # type: ignore[no-untyped-def]
    """A package under src/ (``python_path: [src]``, as Liger-Kernel's is): ``check`` imports the spec from
    there, and so must the reproducer it prints. It imported from the repository's root, and every
    repro of such a library was a spec-import error (seen in the nightly on Liger-Kernel)."""
    repo.commit("a src layout", {".gpu-gate.yml": 'version: 1\nkernels: {include: ["src/**/*.py"]}\n'
                                                  'specs: ["gate/**/*_gate.py"]\npython_path: [src]\n',
                                 "src/mylib/__init__.py": "",
                                 "src/mylib/scale.py": "def scale(x):\n    return x * 2\n",
                                 "gate/scale_gate.py": SRC_GATE})
    ran = _cli("gpu-gate repro gate/scale_gate.py::scale_gate", repo.path)
    assert ran.returncode == 0, ran.stdout + ran.stderr
    assert "spec-import-error" not in ran.stdout and "PASS" in ran.stdout.upper(), ran.stdout
