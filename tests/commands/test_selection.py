"""Every change that can alter a kernel's result reaches the specs that run it, and a spec
covers only the kernels it launches. End to end on real git repositories through the CLI,
as a user runs it; Triton kernels run under the interpreter on the CPU. Each case has its
clean twin."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from conftest_git import GitRepo
from test_cli import gate

CORPUS = Path(__file__).parent.parent / "corpus_wrappers" / "lib"

POLICY = """\
version: 1
specs: ["gate/**/*_gate.py"]
checks:
  compile: off
  determinism: off
  memcheck: off
  racecheck: off
  synccheck: off
  initcheck: off
  equivalence: {cases: 12, growth: false, shrink: false, seed: 7}
"""

RMS_SPEC = """\
import torch
import gpu_gate as gg
from lib.ops import rmsnorm

@gg.spec(dims={"rows": gg.Dim(1, 40), "hidden": gg.Dim(1, 160, reduction=True)},
         inputs={"x": gg.Tensor(("rows", "hidden"), dtypes=["float32"]), "w": gg.Tensor(("hidden",), dtype="like:x")},
         reference=lambda x, w: x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6) * w)
def rmsnorm_gate(x, w):
    return rmsnorm(x, w)
"""

OPS = """\
import torch
import triton

from .kernels import rmsnorm_strided


def rmsnorm(x, w):
    x2, w = x.reshape(-1, x.shape[-1]), w.contiguous()
    y = torch.empty(x2.shape, dtype=x.dtype, device=x.device)
    n_rows, n_cols = x2.shape
    rmsnorm_strided[(triton.cdiv(n_rows, 4),)](x2, w, y, x2.stride(0), x2.stride(1), y.stride(0), n_rows, n_cols,
                                               1e-6, ROWS=4, BLOCK=triton.next_power_of_2(n_cols))
    return y.reshape(x.shape)
"""


def _triton_repo(make_repo) -> GitRepo:  # type: ignore[no-untyped-def]
    return make_repo("proj", {".gpu-gate.yml": POLICY, "lib/__init__.py": "", "lib/kernels.py":
                              (CORPUS / "kernels.py").read_text(), "lib/ops.py": OPS, "gate/rms_gate.py": RMS_SPEC})


def _results(repo: GitRepo) -> dict:  # type: ignore[type-arg]
    return json.loads((repo.path / ".gpu-gate" / "out" / "results.json").read_text())


# --- the wrapper changes, the kernel does not --------------------------------------------------

def test_a_stride_bug_in_the_wrapper_alone_is_red(make_repo) -> None:  # type: ignore[no-untyped-def]
    r = _triton_repo(make_repo)
    r.branch("feature")
    r.commit("assume a unit column stride", {"lib/ops.py": OPS.replace("x2.stride(1), y.stride(0)", "1, y.stride(0)")})
    p = gate("check", "--base", "main", "--head", "feature", cwd=r.path)
    assert p.returncode == 1, p.stdout + p.stderr
    assert "spec gate/rms_gate.py::rmsnorm_gate: imports lib/ops.py, changed" in p.stdout
    assert "FAIL    equivalence gate/rms_gate.py::rmsnorm_gate" in p.stdout
    report = (r.path / ".gpu-gate" / "out" / "report.md").read_text()
    assert "imports lib/ops.py, changed" in report and "launched lib/kernels.py::rmsnorm\\_strided" in report


def test_a_correct_wrapper_refactor_is_green(make_repo) -> None:  # type: ignore[no-untyped-def]
    r = _triton_repo(make_repo)
    r.branch("feature")
    r.commit("name the grid", {"lib/ops.py": OPS.replace("[(triton.cdiv(n_rows, 4),)]", "[grid]").replace(
        "    n_rows, n_cols = x2.shape\n", "    n_rows, n_cols = x2.shape\n    grid = (triton.cdiv(n_rows, 4),)\n")})
    p = gate("check", "--base", "main", "--head", "feature", cwd=r.path)
    assert p.returncode == 0, p.stdout + p.stderr
    assert "PASS    equivalence gate/rms_gate.py::rmsnorm_gate" in p.stdout
    assert _results(r)["selected"] == {"gate/rms_gate.py::rmsnorm_gate": ["imports lib/ops.py, changed"]}


SOFTMAX = """\
import torch


def softmax(x):
    z = x - x.amax(dim=-1, keepdim=True)
    e = z.exp()
    return e / e.sum(dim=-1, keepdim=True)
"""

SOFTMAX_SPEC = """\
import torch
import gpu_gate as gg
from lib.softmax import softmax

@gg.spec(dims={"rows": gg.Dim(1, 64), "n": gg.Dim(1, 512, reduction=True)},
         inputs={"x": gg.Tensor(("rows", "n"), dtypes=["float32"])},
         reference=lambda x: torch.softmax(x, dim=-1))
def softmax_gate(x):
    return softmax(x)
"""


@pytest.mark.parametrize("bug", [False, True], ids=["refactor", "wrong-dim"])
def test_a_plain_torch_wrapper_without_any_kernel_is_judged(make_repo, bug: bool) -> None:  # type: ignore[no-untyped-def]
    r = make_repo("proj", {".gpu-gate.yml": POLICY, "lib/__init__.py": "", "lib/softmax.py": SOFTMAX,
                           "gate/softmax_gate.py": SOFTMAX_SPEC})
    r.branch("feature")
    new = SOFTMAX.replace("e.sum(dim=-1", "e.sum(dim=0") if bug else SOFTMAX.replace("e = z.exp()", "e = torch.exp(z)")
    r.commit("softmax", {"lib/softmax.py": new})
    p = gate("check", "--base", "main", "--head", "feature", cwd=r.path)
    assert "no kernel changes" not in p.stdout
    assert "spec gate/softmax_gate.py::softmax_gate: imports lib/softmax.py, changed" in p.stdout
    assert p.returncode == (1 if bug else 0), p.stdout + p.stderr


def test_only_the_spec_changes_its_jobs_run_and_no_other(make_repo) -> None:  # type: ignore[no-untyped-def]
    r = make_repo("proj", {".gpu-gate.yml": POLICY, "lib/__init__.py": "", "lib/softmax.py": SOFTMAX,
                           "gate/softmax_gate.py": SOFTMAX_SPEC,
                           "gate/other_gate.py": SOFTMAX_SPEC.replace("softmax_gate", "other_gate")})
    r.branch("feature")
    r.commit("wider rows", {"gate/softmax_gate.py": SOFTMAX_SPEC.replace("gg.Dim(1, 64)", "gg.Dim(1, 96)")})
    p = gate("plan", "--base", "main", "--head", "feature", cwd=r.path)
    plan = json.loads(p.stdout)
    assert [j["id"] for j in plan["jobs"]] == ["equivalence:gate/softmax_gate.py::softmax_gate"]
    assert plan["jobs"][0]["why"] == ["the spec file is changed"]
    assert "no kernel changes" not in plan["notes"]
    p = gate("check", "--base", "main", "--head", "feature", cwd=r.path)
    assert p.returncode == 0 and "PASS    equivalence gate/softmax_gate.py::softmax_gate" in p.stdout, p.stdout


def test_an_unrelated_change_runs_nothing(make_repo) -> None:  # type: ignore[no-untyped-def]
    r = _triton_repo(make_repo)
    r.branch("feature")
    r.commit("docs", {"README.md": "more\n", "tools/lint.py": "print('lint')\n"})
    p = gate("check", "--base", "main", "--head", "feature", cwd=r.path)
    assert p.returncode == 0 and "no kernel changes" in p.stdout, p.stdout


def test_deleting_a_module_a_spec_imports_is_a_finding(make_repo) -> None:  # type: ignore[no-untyped-def]
    r = make_repo("proj", {".gpu-gate.yml": POLICY, "lib/__init__.py": "", "lib/softmax.py": SOFTMAX,
                           "lib/helpers.py": "SCALE = 1.0\n",
                           "gate/softmax_gate.py": "from lib import helpers\n" + SOFTMAX_SPEC})
    r.branch("feature")
    r.git("rm", "-q", "lib/helpers.py")
    r.commit("drop helpers")
    p = gate("list-kernels", "--base", "main", "--head", "feature", cwd=r.path)
    assert ("gate/softmax_gate.py:1: imports lib.helpers, but this change deletes lib/helpers.py: spec softmax_gate "
            "cannot import it") in p.stdout, p.stdout
    p = gate("check", "--base", "main", "--head", "feature", cwd=r.path)
    assert p.returncode == 1, p.stdout
    kinds = {f["kind"] for f in _results(r)["plan_findings"]}
    assert "spec-import-error" in kinds


# --- a spec covers only what it launches ------------------------------------------------------

CE_KERNEL = """\
import triton
import triton.language as tl


@triton.jit
def _ce_kernel(X, Y, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    x = tl.load(X + offs, mask=offs < n, other=0.0)
    tl.store(Y + offs, -x, mask=offs < n)


def cross_entropy(x):
    import torch
    x = x.contiguous()
    y = torch.empty_like(x)
    _ce_kernel[(triton.cdiv(x.numel(), 128),)](x, y, x.numel(), BLOCK=128)
    return y
"""

RMS_OP = """\
import torch
import triton

from .rms_kernels import rmsnorm_strided


def rms_norm(x, w):
    x2, w = x.reshape(-1, x.shape[-1]), w.contiguous()
    y = torch.empty(x2.shape, dtype=x.dtype, device=x.device)
    n_rows, n_cols = x2.shape
    rmsnorm_strided[(triton.cdiv(n_rows, 4),)](x2, w, y, x2.stride(0), x2.stride(1), y.stride(0), n_rows, n_cols,
                                               1e-6, ROWS=4, BLOCK=triton.next_power_of_2(n_cols))
    return y.reshape(x.shape)
"""

LIGER_SPEC = RMS_SPEC.replace("from lib.ops import rmsnorm", "from liger.ops import rms_norm").replace(
    "return rmsnorm(x, w)", "return rms_norm(x, w)")


def _liger_repo(make_repo) -> GitRepo:  # type: ignore[no-untyped-def]
    """Liger-Kernel's shape: a src/ layout, an ops package whose __init__ imports every op,
    one spec for one op."""
    return make_repo("liger", {
        ".gpu-gate.yml": POLICY,
        "pyproject.toml": '[project]\nname = "liger"\nversion = "0"\n\n[tool.setuptools.packages.find]\nwhere = ["src"]\n',
        "src/liger/__init__.py": "",
        "src/liger/ops/__init__.py": "from .cross_entropy import cross_entropy\nfrom .rms_norm import rms_norm\n",
        "src/liger/ops/cross_entropy.py": CE_KERNEL,
        "src/liger/ops/rms_norm.py": RMS_OP,
        "src/liger/ops/rms_kernels.py": (CORPUS / "kernels.py").read_text(),
        "gate/rms_gate.py": LIGER_SPEC,
    })


def test_a_reexporting_package_does_not_make_one_spec_cover_every_op(make_repo, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    r = _liger_repo(make_repo)
    cache = str(tmp_path / "cache")
    r.branch("tune-rms")
    r.commit("rms: two rows a program", {"src/liger/ops/rms_norm.py": RMS_OP.replace("ROWS=4", "ROWS=2").replace(
        "cdiv(n_rows, 4)", "cdiv(n_rows, 2)")})
    p = gate("check", "--base", "main", "--head", "tune-rms", "--cache-dir", cache, cwd=r.path)
    assert p.returncode == 0, p.stdout + p.stderr  # the src/ layout imports without PYTHONPATH
    r.checkout("main")
    r.git("merge", "-q", "--ff-only", "tune-rms")

    r.branch("ce")
    r.commit("ce: new kernel body", {"src/liger/ops/cross_entropy.py": CE_KERNEL.replace("-x", "x * -1.0")})
    # Before anything runs, the launches recorded at the base predict the gap, without torch.
    code = ("import sys; sys.modules['torch'] = None; from gpu_gate.cli import main; "
            f"sys.exit(main(['list-kernels', '--base', 'main', '--head', 'ce', '--cache-dir', {cache!r}]))")
    lk = subprocess.run([sys.executable, "-c", code], cwd=r.path, capture_output=True, text=True)
    assert lk.returncode == 0, lk.stderr
    assert "src/liger/ops/cross_entropy.py  [triton, modified]" in lk.stdout
    assert "PREDICTED UNCOVERED" in lk.stdout and "launched src/liger/ops/rms_kernels.py::rmsnorm_strided" in lk.stdout
    assert "gate/rms_gate.py::rmsnorm_gate: imports src/liger/ops/cross_entropy.py, changed" in lk.stdout

    # The run decides: the spec ran, launched only the RMSNorm kernel, so cross-entropy is uncovered.
    p = gate("check", "--base", "main", "--head", "ce", "--cache-dir", cache, cwd=r.path)
    assert p.returncode == 1, p.stdout + p.stderr
    uncovered = [f for f in _results(r)["plan_findings"] if f["kind"] == "uncovered"]
    assert [f["file"] for f in uncovered] == ["src/liger/ops/cross_entropy.py"]
    assert "ran without launching any of its kernels" in uncovered[0]["message"]
    assert uncovered[0]["details"]["launched"] == {
        "gate/rms_gate.py::rmsnorm_gate": ["src/liger/ops/rms_kernels.py::rmsnorm_strided"]}


def test_the_same_package_with_a_spec_for_the_changed_op_is_green(make_repo) -> None:  # type: ignore[no-untyped-def]
    r = _liger_repo(make_repo)
    r.branch("ce")
    ce_spec = ("import torch\nimport gpu_gate as gg\nfrom liger.ops import cross_entropy\n\n"
               "@gg.spec(dims={'n': gg.Dim(1, 700)}, inputs={'x': gg.Tensor(('n',), dtypes=['float32'])},\n"
               "         reference=lambda x: -x)\ndef ce_gate(x):\n    return cross_entropy(x)\n")
    r.commit("ce: new kernel body, with its spec", {"src/liger/ops/cross_entropy.py": CE_KERNEL.replace("-x", "x * -1.0"),
                                                     "gate/ce_gate.py": ce_spec})
    p = gate("check", "--base", "main", "--head", "ce", "--no-cache", cwd=r.path)
    assert p.returncode == 0, p.stdout + p.stderr
    kernels = {k["path"]: k["specs"] for k in _results(r)["kernels"]}
    assert kernels == {"src/liger/ops/cross_entropy.py": ["gate/ce_gate.py::ce_gate"]}


HELPERS = """\
import triton
import triton.language as tl


@triton.jit
def twice(x):
    return x * 2.0
"""

USES_HELPER = """\
import torch
import triton
import triton.language as tl

from . import jit_helpers


@triton.jit
def _double(X, Y, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(Y + offs, jit_helpers.twice(tl.load(X + offs, mask=offs < n)), mask=offs < n)


def double(x):
    x = x.contiguous()
    y = torch.empty_like(x)
    _double[(triton.cdiv(x.numel(), 64),)](x, y, x.numel(), BLOCK=64)
    return y
"""


@pytest.mark.parametrize("bug", [False, True], ids=["same-value", "wrong-value"])
def test_a_changed_jit_helper_is_covered_by_the_kernel_that_calls_it(make_repo, bug: bool) -> None:  # type: ignore[no-untyped-def]
    spec = ("import gpu_gate as gg\nfrom lib.double import double\n\n"
            "@gg.spec(dims={'n': gg.Dim(1, 300)}, inputs={'x': gg.Tensor(('n',), dtypes=['float32'])},\n"
            "         reference=lambda x: 2 * x)\ndef double_gate(x):\n    return double(x)\n")
    r = make_repo("proj", {".gpu-gate.yml": POLICY, "lib/__init__.py": "", "lib/jit_helpers.py": HELPERS,
                           "lib/double.py": USES_HELPER, "gate/double_gate.py": spec})
    r.branch("feature")
    r.commit("helper", {"lib/jit_helpers.py": HELPERS.replace("x * 2.0", "x * 2.5" if bug else "x + x")})
    p = gate("check", "--base", "main", "--head", "feature", "--no-cache", cwd=r.path)
    assert p.returncode == (1 if bug else 0), p.stdout + p.stderr
    kernels = {k["path"]: k["specs"] for k in _results(r)["kernels"]}
    assert kernels == {"lib/jit_helpers.py": ["gate/double_gate.py::double_gate"]}
    assert not [f for f in _results(r)["plan_findings"] if f["kind"] == "uncovered"]


# --- local use: the work tree; src/ layouts -------------------------------------------------

def test_an_uncommitted_spec_is_seen_and_run_in_local_use(make_repo) -> None:  # type: ignore[no-untyped-def]
    r = make_repo("proj", {".gpu-gate.yml": POLICY, "lib/__init__.py": "", "lib/softmax.py": SOFTMAX})
    r.branch("feature")
    r.write("gate/softmax_gate.py", SOFTMAX_SPEC)  # not committed, not even added
    p = gate("list-kernels", "--base", "main", cwd=r.path)
    assert "the work tree (uncommitted and untracked files included" in p.stdout
    assert "gate/softmax_gate.py::softmax_gate: the spec file is added" in p.stdout, p.stdout
    p = gate("check", "--base", "main", cwd=r.path)
    assert p.returncode == 0 and "PASS    equivalence gate/softmax_gate.py::softmax_gate" in p.stdout, p.stdout
    # --head keeps to commits: the uncommitted spec is not there.
    p = gate("check", "--base", "main", "--head", "feature", cwd=r.path)
    assert p.returncode == 0 and "no kernel changes" in p.stdout, p.stdout


def test_an_uncommitted_bug_in_a_wrapper_is_red_in_local_use(make_repo) -> None:  # type: ignore[no-untyped-def]
    r = make_repo("proj", {".gpu-gate.yml": POLICY, "lib/__init__.py": "", "lib/softmax.py": SOFTMAX,
                           "gate/softmax_gate.py": SOFTMAX_SPEC})
    r.write("lib/softmax.py", SOFTMAX.replace("e.sum(dim=-1", "e.sum(dim=0"))
    p = gate("check", "--base", "main", cwd=r.path)
    assert p.returncode == 1, p.stdout
    assert "spec gate/softmax_gate.py::softmax_gate: imports lib/softmax.py, changed" in p.stdout


def test_a_wrong_python_path_names_the_key(make_repo) -> None:  # type: ignore[no-untyped-def]
    r = _liger_repo(make_repo)
    r.commit("policy", {".gpu-gate.yml": POLICY + "python_path: [lib]\n"})  # the base's policy is in force
    r.branch("feature")
    r.commit("touch", {"src/liger/ops/rms_norm.py": RMS_OP + "\nTOUCHED = True\n"})
    p = gate("check", "--base", "main", "--head", "feature", "--no-cache", cwd=r.path)
    assert p.returncode == 1, p.stdout
    assert "No module named 'liger'" in p.stdout and "set `python_path: [src]` in .gpu-gate.yml" in p.stdout, p.stdout


# --- a namespace package at the top (PEP 420), src layout: Liger-Kernel's tree until late 2024 ----

def test_a_wrapper_change_in_a_namespace_package_selects_its_spec(make_repo) -> None:  # type: ignore[no-untyped-def]
    """``src/nslib`` has no ``__init__.py``; ``nslib.ops`` is a regular package inside it. The spec
    imports the wrapper by its dotted name: a change to the wrapper reaches the spec (it used to be
    an uncovered kernel with no job at all)."""
    spec = RMS_SPEC.replace("from lib.ops import rmsnorm", "from nslib.ops.ops import rmsnorm")
    r = make_repo("proj", {".gpu-gate.yml": POLICY + "python_path: [src]\n", "src/nslib/ops/__init__.py": "",
                           "src/nslib/ops/kernels.py": (CORPUS / "kernels.py").read_text(),
                           "src/nslib/ops/ops.py": OPS, "gate/rms_gate.py": spec})
    r.branch("feature")
    r.commit("assume a unit column stride", {"src/nslib/ops/ops.py": OPS.replace("x2.stride(1), y.stride(0)",
                                                                                 "1, y.stride(0)")})
    p = gate("check", "--base", "main", "--head", "feature", cwd=r.path)
    assert p.returncode == 1, p.stdout + p.stderr
    assert "spec gate/rms_gate.py::rmsnorm_gate: imports src/nslib/ops/ops.py, changed" in p.stdout
    assert "FAIL    equivalence gate/rms_gate.py::rmsnorm_gate" in p.stdout
    assert "no gate spec covers" not in p.stdout


# --- a kernel's body runs only where it is launched: narrowing ---------------------------------
# A change inside a @triton.jit body of one op reaches every spec through a re-exporting __init__;
# only the specs seen (on this code) to launch the op's kernels can see it. The others do not run.
# Anything else in the file (host code, a global, a decorator, a new import) and they all run.

CE_SPEC = ("import torch\nimport gpu_gate as gg\nfrom liger.ops import cross_entropy\n\n"
           "@gg.spec(dims={'n': gg.Dim(1, 700)}, inputs={'x': gg.Tensor(('n',), dtypes=['float32'])},\n"
           "         reference=lambda x: -x)\ndef ce_gate(x):\n    return cross_entropy(x)\n")


def _recorded(make_repo, tmp_path: Path) -> tuple[GitRepo, str]:  # type: ignore[no-untyped-def]
    """The Liger-shaped repository with a spec per op, and the launches of a run of main's own commit
    recorded (a nightly, or the run after a merge)."""
    r = _liger_repo(make_repo)
    r.commit("ce spec", {"gate/ce_gate.py": CE_SPEC, ".gitignore": ".gpu-gate/\n"})
    cache = str(tmp_path / "cache")
    p = gate("check", "--all", "--base", "main", "--head", "main", "--cache-dir", cache, cwd=r.path)
    assert p.returncode == 0, p.stdout + p.stderr
    return r, cache


def _planned(r: GitRepo, cache: str, head: str, edit: str) -> dict:  # type: ignore[type-arg]
    r.checkout("main")
    r.branch(head)
    r.commit(head, {"src/liger/ops/cross_entropy.py": edit})
    p = gate("plan", "--base", "main", "--head", head, "--cache-dir", cache, cwd=r.path)
    assert p.returncode == 0, p.stdout + p.stderr
    return json.loads(p.stdout)  # type: ignore[no-any-return]


BODY = CE_KERNEL.replace("-x", "x * -1.0")  # inside the kernel's body only
EDITS = {
    "host code": CE_KERNEL.replace("    x = x.contiguous()\n", "    x = x.contiguous() * 1.0\n"),
    "a global": CE_KERNEL + "\nSCALE = 2.0\n",
    "a decorator": CE_KERNEL.replace("@triton.jit\n", "@triton.jit(do_not_specialize=['n'])\n"),
    # the attack: a body change that also reaches into another op at import
    "body and a patch of another op": BODY + ("\nfrom . import rms_norm as _r\n_inner = _r.rms_norm\n"
                                              "_r.rms_norm = lambda x, w: _inner(x, w) * 1.001\n"),
}


def test_a_kernel_body_change_runs_only_the_specs_seen_to_launch_it(make_repo, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    r, cache = _recorded(make_repo, tmp_path)
    plan = _planned(r, cache, "body", BODY)
    assert sorted(plan["selected"]) == ["gate/ce_gate.py::ce_gate"], plan["selected"]
    assert {j["spec"]["name"] for j in plan["jobs"] if j.get("spec")} == {"ce_gate"}
    note = [n for n in plan["notes"] if "rmsnorm_gate not run" in n]
    assert note and "changed only inside @triton.jit bodies" in note[0] and "rmsnorm_strided" in note[0], plan["notes"]
    assert "a run of the base's commit saw it launch none of their kernels" in note[0]
    assert not [f for f in plan["findings"] if f["kind"].startswith("uncovered")], plan["findings"]
    # and the gate on it: the change is judged by the spec that launches it, and is green
    p = gate("check", "--base", "main", "--head", "body", "--cache-dir", cache, cwd=r.path)
    assert p.returncode == 0, p.stdout + p.stderr


@pytest.mark.parametrize("what", sorted(EDITS))
def test_anything_beside_a_kernel_body_runs_every_spec_that_imports_it(make_repo, tmp_path: Path,  # type: ignore[no-untyped-def]
                                                                       what: str) -> None:
    r, cache = _recorded(make_repo, tmp_path)
    plan = _planned(r, cache, "edit", EDITS[what])
    assert sorted(plan["selected"]) == ["gate/ce_gate.py::ce_gate", "gate/rms_gate.py::rmsnorm_gate"], what
    assert not [n for n in plan["notes"] if "not run" in n], plan["notes"]


def test_without_a_launch_record_every_importing_spec_runs(make_repo, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    r = _liger_repo(make_repo)
    r.commit("ce spec", {"gate/ce_gate.py": CE_SPEC, ".gitignore": ".gpu-gate/\n"})
    r.branch("body")
    r.commit("body", {"src/liger/ops/cross_entropy.py": BODY})
    p = gate("plan", "--base", "main", "--head", "body", "--cache-dir", str(tmp_path / "empty"), cwd=r.path)
    assert p.returncode == 0, p.stderr
    assert sorted(json.loads(p.stdout)["selected"]) == ["gate/ce_gate.py::ce_gate", "gate/rms_gate.py::rmsnorm_gate"]


def test_the_patch_of_another_op_is_red(make_repo, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    """The attack end to end: the other op's spec runs, and sees what the patch does to it."""
    r, cache = _recorded(make_repo, tmp_path)
    _planned(r, cache, "attack", EDITS["body and a patch of another op"])
    p = gate("check", "--base", "main", "--head", "attack", "--cache-dir", cache, cwd=r.path)
    assert p.returncode == 1, p.stdout + p.stderr
    failed = {x["spec"] for x in _results(r)["results"] if x["status"] == "failed"}
    assert "gate/rms_gate.py::rmsnorm_gate" in failed, failed


def test_kernel_bodies_only_reads_the_module_not_its_text() -> None:
    from gpu_gate.coverage import kernel_bodies_only

    assert kernel_bodies_only(CE_KERNEL, BODY)
    assert kernel_bodies_only(CE_KERNEL, CE_KERNEL.replace("import triton\n", "import triton  # the compiler\n"))
    for what, edit in EDITS.items():
        assert not kernel_bodies_only(CE_KERNEL, edit), what
    # a function some other decorator compiles for the host is host code
    numba = "import numba\n\n\n@numba.jit\ndef f(x):\n    return x + 1\n"
    assert not kernel_bodies_only(numba, numba.replace("x + 1", "x + 2"))
    aliased = "from triton import jit as J\n\n\n@J\ndef k(X):\n    pass\n"
    assert kernel_bodies_only(aliased, aliased.replace("pass", "X += 1"))
    assert not kernel_bodies_only(CE_KERNEL, "def broken(:\n")


def test_a_pull_requests_record_of_its_launches_spares_no_spec(make_repo, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    """What a pull request's worker says it launched is the code under review's word: recorded on the
    very content the next change starts from, it predicts coverage but never spares a spec a run."""
    r = _liger_repo(make_repo)
    r.commit("ce spec", {"gate/ce_gate.py": CE_SPEC, ".gitignore": ".gpu-gate/\n"})
    cache = str(tmp_path / "cache")
    r.branch("pr")
    r.commit("a readme", {"README.md": "ops\n"})
    p = gate("check", "--all", "--base", "main", "--head", "pr", "--cache-dir", cache, cwd=r.path)
    assert p.returncode == 0, p.stdout + p.stderr  # every spec ran on the pull request's commit
    plan = _planned(r, cache, "body", BODY)
    assert sorted(plan["selected"]) == ["gate/ce_gate.py::ce_gate", "gate/rms_gate.py::rmsnorm_gate"]


def test_a_kernel_no_remaining_spec_launches_is_uncovered_before_the_run(make_repo, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    r, cache = _recorded(make_repo, tmp_path)
    r.checkout("main")
    r.git("rm", "-q", "gate/ce_gate.py")
    r.git("commit", "-q", "-m", "drop the ce spec")
    p = gate("check", "--all", "--base", "main", "--head", "main", "--cache-dir", cache, cwd=r.path)
    assert p.returncode == 0, p.stdout + p.stderr
    plan = _planned(r, cache, "body2", BODY)
    assert plan["selected"] == {}, plan["selected"]
    uncovered = [f for f in plan["findings"] if f["kind"] == "uncovered"]
    assert [f["file"] for f in uncovered] == ["src/liger/ops/cross_entropy.py"], plan["findings"]
    assert uncovered[0]["severity"] == "error" and "launch none of its kernels" in uncovered[0]["message"]
    assert not [f for f in plan["findings"] if f["kind"] == "uncovered-predicted"]
    assert [k["specs"] for k in plan["kernels"] if k["path"] == "src/liger/ops/cross_entropy.py"] == [[]]
    p = gate("check", "--base", "main", "--head", "body2", "--cache-dir", cache, cwd=r.path)
    assert p.returncode == 1, p.stdout + p.stderr
