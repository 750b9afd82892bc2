"""The truth comes from the base's tree: the reference, and every repository module it imports, are
the base's; in the reference's worker the repository never shadows an installed package.

Real git repositories, the real CLI, sandboxed workers, on the CPU. The kernel file is
`csrc/rows.cu`; the code the spec calls is a plain torch wrapper (`mylib/ops.py`), as in
test_differential.py. Each attack is a pull request that makes the truth agree with a buggy
kernel without touching the spec; each twin is the honest change of the same shape.
"""
from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from conftest_git import GitRepo
from test_cli import gate

POLICY = """\
version: 1
kernels: {include: ["csrc/**/*.cu"]}
specs: ["gate/**/*_gate.py"]
not_run: warn
checks:
  compile: off
  determinism: off
  memcheck: off
  racecheck: off
  synccheck: off
  initcheck: off
  equivalence: {cases: 6, growth: false, shrink: false, seed: 5}
"""

EXACT = "def row_sum(x):\n    return x.double().sum(-1).to(x.dtype)\n"
# Wrong for rows longer than 64: the buggy kernel.
TRUNCATED = "def row_sum(x):\n    return x[..., :64].double().sum(-1).to(x.dtype)\n"
KERNEL = "__global__ void rows(const float* x, float* y, int n) { /* row sums */ }\n"
# The pull request's kernel: a token changes (a comment alone is no change to judge).
TUNED = KERNEL + "static const int tuned_ = 1;\n"

# --- (a) a helper two imports away from the reference --------------------------------------

HELPER_SPEC = """\
import gpu_gate as gg
from gate.common import ref
from mylib.ops import row_sum


@gg.spec(dims={"rows": gg.Dim(1, 16), "n": gg.Dim(1, 200, reduction=True)},
         inputs={"x": gg.Tensor(("rows", "n"), dtypes=["float32"])},
         reference=ref, covers=["csrc/rows.cu"], devices=["cuda", "cpu"])
def row_sum_gate(x):
    return row_sum(x)
"""
COMMON = "from gate.util import total\n\n\ndef ref(x):\n    return total(x)\n"
UTIL = "def total(x):\n    return x.sum(-1)\n"
# The pull request's helper: the truth now drops the tail, as the buggy kernel does.
UTIL_BENT = "def total(x):\n    return x[..., :64].sum(-1)\n"
# The twin: the same sums, written another way (an honest refactor of the helper).
UTIL_REFACTORED = "import torch\n\n\ndef total(x):\n    return torch.sum(x, dim=-1)\n"


def _helper_repo(make_repo) -> GitRepo:  # type: ignore[no-untyped-def]
    r = make_repo("proj", {".gpu-gate.yml": POLICY, "mylib/__init__.py": "", "mylib/ops.py": EXACT,
                           "csrc/rows.cu": KERNEL, "gate/__init__.py": "", "gate/common.py": COMMON,
                           "gate/util.py": UTIL, "gate/rows_gate.py": HELPER_SPEC})
    r.branch("feature")
    return r


def _check(r: GitRepo, *args: str) -> tuple[int, str, dict]:  # type: ignore[type-arg]
    p = gate("check", "--base", "main", "--cpu", *args, cwd=r.path)
    out = r.path / ".gpu-gate" / "out"
    report = (out / "report.md").read_text() if (out / "report.md").exists() else ""
    results = json.loads((out / "results.json").read_text()) if (out / "results.json").exists() else {}
    return p.returncode, p.stdout + p.stderr + report, results


def _findings(results: dict) -> list[dict]:  # type: ignore[type-arg]
    return [f for r in results.get("results", []) for f in r["findings"]] + results.get("plan_findings", [])


def _kinds(results: dict) -> set[str]:  # type: ignore[type-arg]
    return {f["kind"] for f in _findings(results)}


def test_a_helper_two_imports_away_cannot_bend_the_truth(make_repo) -> None:  # type: ignore[no-untyped-def]
    """The attack: the spec is untouched; the change edits gate/util.py, which the reference reaches
    through gate/common.py, so that the truth drops the tail as its buggy kernel does. Before, the
    head's helper computed the truth: PASS, and the base's correct code was "fixed by this change"."""
    r = _helper_repo(make_repo)
    r.commit("pull request", {"mylib/ops.py": TRUNCATED, "gate/util.py": UTIL_BENT,
                              "csrc/rows.cu": TUNED})
    code, text, results = _check(r)
    assert code == 1, text
    mismatches = [f for f in _findings(results) if f["kind"] == "mismatch"]
    assert mismatches and all(f["details"].get("change") == "new" for f in mismatches), _findings(results)
    assert "fixed by this change" not in text
    # What happened is named: the reference's code changed, and the base's computed the truth.
    helper = [f for f in _findings(results) if f["kind"] == "rules-changed" and "gate/util.py" in f["message"]]
    assert helper, _findings(results)
    assert "the truth is computed with the base's" in helper[0]["message"]
    assert any(f["kind"] == "reference-not-isolated" and "from the base's tree" in f["message"]
               for f in _findings(results)), _findings(results)


def test_a_helper_refactor_that_keeps_the_results_passes(make_repo) -> None:  # type: ignore[no-untyped-def]
    """The twin: the same helper rewritten, the same sums; the kernel untouched in substance."""
    r = _helper_repo(make_repo)
    r.commit("pull request", {"gate/util.py": UTIL_REFACTORED,
                              "csrc/rows.cu": TUNED})
    code, text, results = _check(r)
    assert code == 0, text
    assert "mismatch" not in _kinds(results)
    assert any(f["kind"] == "rules-changed" and "gate/util.py" in f["message"] for f in _findings(results))


# --- (b) a repository package named like an installed one ----------------------------------

# The package the base's reference takes its truth from, installed on the runner for these tests
# only: in a directory on PYTHONPATH, which the workers put on sys.path behind the repository, as
# they put site-packages (a package torch or gpu-gate imports first, such as mpmath, could not show
# the attack: it is taken before the repository is on sys.path).
INSTALLED = "def fsum(xs):\n    return float(sum(sorted(xs, key=abs)))\n"
EXACT_SPEC = """\
import gg_exact_sums
import torch
import gpu_gate as gg
from mylib.ops import row_sum


def exact_sums(x):
    return torch.tensor([gg_exact_sums.fsum(row) for row in x.tolist()], dtype=x.dtype)


@gg.spec(dims={"rows": gg.Dim(1, 16), "n": gg.Dim(1, 200, reduction=True)},
         inputs={"x": gg.Tensor(("rows", "n"), dtypes=["float32"])},
         reference=exact_sums, covers=["csrc/rows.cu"], devices=["cuda", "cpu"])
def row_sum_gate(x):
    return row_sum(x)
"""
# The pull request's `gg_exact_sums`: its fsum drops the tail, as the buggy kernel does.
FAKE = "def fsum(xs):\n    return float(sum(list(xs)[:64]))\n"


@pytest.fixture
def installed(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    site = tmp_path / "installed"
    (site / "gg_exact_sums").mkdir(parents=True)
    (site / "gg_exact_sums" / "__init__.py").write_text(INSTALLED)
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(p for p in (str(site), os.environ.get("PYTHONPATH")) if p))
    return site


def _installed_repo(make_repo) -> GitRepo:  # type: ignore[no-untyped-def]
    r = make_repo("proj", {".gpu-gate.yml": POLICY, "mylib/__init__.py": "", "mylib/ops.py": EXACT,
                           "csrc/rows.cu": KERNEL, "gate/rows_gate.py": EXACT_SPEC})
    r.branch("feature")
    return r


def test_a_repository_package_cannot_shadow_the_installed_one_the_truth_uses(make_repo, installed: Path) -> None:  # type: ignore[no-untyped-def]
    """The attack: a new top-level `gg_exact_sums/` in the repository, named like the installed
    package the base's reference takes its truth from. Before, the worker put the repository ahead of
    the installed packages, and the head's `gg_exact_sums` computed the truth: PASS, with a note only."""
    r = _installed_repo(make_repo)
    r.commit("pull request", {"mylib/ops.py": TRUNCATED, "gg_exact_sums/__init__.py": FAKE,
                              "csrc/rows.cu": TUNED})
    code, text, results = _check(r)
    assert code == 1, text
    shadow = [f for f in _findings(results) if f["kind"] == "rules-weakened"
              and "'gg_exact_sums' was an installed package at the base" in f["message"]]
    assert shadow and shadow[0]["severity"] == "error", _findings(results)
    assert shadow[0]["file"] == "gg_exact_sums/__init__.py"
    assert any(f["kind"] == "mismatch" for f in _findings(results)), _findings(results)


def test_a_reference_that_imports_a_real_installed_package_passes(make_repo, installed: Path) -> None:  # type: ignore[no-untyped-def]
    """The twin: the same spec, the installed package, a correct change to the kernel."""
    r = _installed_repo(make_repo)
    r.commit("pull request", {"mylib/ops.py": "def row_sum(x):\n    return x.double().flip(-1).sum(-1).to(x.dtype)\n",
                              "csrc/rows.cu": TUNED})
    code, text, results = _check(r)
    assert code == 0, text
    assert "rules-weakened" not in _kinds(results) and "mismatch" not in _kinds(results)


# --- without the base's tree -------------------------------------------------------------------

def _executor_repo(root: Path) -> Path:
    for rel, text in {"mylib/__init__.py": "", "mylib/ops.py": EXACT, "gate/__init__.py": "",
                      "gate/common.py": COMMON, "gate/util.py": UTIL, "gate/rows_gate.py": HELPER_SPEC}.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text)
    return root


def _job(truth: str | None) -> object:
    from gpu_gate.protocol.jobs import TRUTH, Job, SpecRef

    return Job(id="equivalence:gate/rows_gate.py::row_sum_gate", check="equivalence", level="required",
               kernels=(), spec=SpecRef("gate/rows_gate.py", "row_sum_gate"),
               options={"cases": 4, "growth": False, "shrink": False, **({TRUTH: truth} if truth else {})})


def test_a_reference_that_needs_the_repository_fails_closed_without_the_bases_tree(tmp_path: Path) -> None:
    """The job names the commit its truth comes from, and the gate has no tree of it: the reference,
    which needs the repository's code, is not computed from the head's instead."""
    from gpu_gate.executor.options import ExecOptions
    from gpu_gate.executor.scheduling import execute
    from gpu_gate.findings import Status

    root = _executor_repo(tmp_path / "head")
    (result,) = execute([_job("0" * 40)], ExecOptions(repo_root=root, gpus=(), timeout_s=300))
    assert result.status is Status.ERROR, [f"{f.kind}: {f.message}" for f in result.findings]
    (f,) = [f for f in result.findings if "must come from the base's tree at 000000000000" in f.message]
    assert f.kind in ("truth-unavailable", "reference-error") and f.severity.value == "error"


def test_the_reference_loads_from_the_tree_the_job_names(tmp_path: Path) -> None:
    """The same head with the bent helper, judged with the base's tree at hand: the base's helper
    computes the truth, and the truncating kernel fails; without the job naming a truth commit, the
    head's helper would have passed it."""
    from gpu_gate.executor.options import ExecOptions
    from gpu_gate.executor.scheduling import execute
    from gpu_gate.findings import Status

    base = _executor_repo(tmp_path / "base")
    head = _executor_repo(tmp_path / "head")
    (head / "gate" / "util.py").write_text(UTIL_BENT)
    (head / "mylib" / "ops.py").write_text(TRUNCATED)
    judged, bent = execute([_job("1" * 40)], ExecOptions(repo_root=head, gpus=(), timeout_s=300,
                                                         truth_roots=(("1" * 40, base),)))[0], \
        execute([_job(None)], ExecOptions(repo_root=head, gpus=(), timeout_s=300))[0]
    assert judged.status is Status.FAILED and any(f.kind == "mismatch" for f in judged.findings)
    assert bent.status is Status.PASSED, [f"{f.kind}: {f.message}" for f in bent.findings]
