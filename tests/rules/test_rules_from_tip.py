"""The rules come from the base branch's tip, not from the merge base: a pull request branched from
an older main is judged by the policy and the specs the maintainers hold now. The merge base stays
the base of the diff (what the change did to the rules) and of the differential runs.

Real git repositories and the real CLI, on the CPU.
"""
from __future__ import annotations

import json

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
  equivalence: {cases: 6, growth: false, shrink: false, seed: 3}
"""

EXACT = "def row_sum(x):\n    return x.double().sum(-1).to(x.dtype)\n"
TRUNCATED = "def row_sum(x):\n    return x[..., :64].double().sum(-1).to(x.dtype)\n"
KERNEL = "__global__ void rows(const float* x, float* y, int n) { /* row sums */ }\n"
# The pull request's kernel: a token changes (a comment alone is no change to judge).
TUNED = KERNEL + "static const int tuned_ = 1;\n"
# The spec the branch started from: rows of 64 at most, where the truncated sum is right.
SHORT_SPEC = """\
import gpu_gate as gg
from mylib.ops import row_sum


@gg.spec(dims={"rows": gg.Dim(1, 16), "n": gg.Dim(1, 64, reduction=True)},
         inputs={"x": gg.Tensor(("rows", "n"), dtypes=["float32"])},
         reference=lambda x: x.sum(-1), covers=["csrc/rows.cu"], devices=["cuda", "cpu"])
def row_sum_gate(x):
    return row_sum(x)
"""
# What the maintainers made of it on main since: rows up to 200.
LONG_SPEC = SHORT_SPEC.replace("gg.Dim(1, 64, reduction=True)", "gg.Dim(1, 200, reduction=True)")


def _check(r: GitRepo) -> tuple[int, str, dict]:  # type: ignore[type-arg]
    p = gate("check", "--base", "main", "--cpu", cwd=r.path)
    out = r.path / ".gpu-gate" / "out"
    report = (out / "report.md").read_text() if (out / "report.md").exists() else ""
    results = json.loads((out / "results.json").read_text()) if (out / "results.json").exists() else {}
    return p.returncode, p.stdout + p.stderr + report, results


def _findings(results: dict) -> list[dict]:  # type: ignore[type-arg]
    return [f for r in results.get("results", []) for f in r["findings"]] + results.get("plan_findings", [])


def _branched_before(make_repo, main_files: dict[str, str]) -> tuple[GitRepo, str, str]:  # type: ignore[no-untyped-def]
    """A repository whose feature branch left main at its first commit; main then moved on with
    ``main_files``. Returns the repository, the merge base and main's tip."""
    r = make_repo("proj", {".gpu-gate.yml": POLICY, "mylib/__init__.py": "", "mylib/ops.py": EXACT,
                           "csrc/rows.cu": KERNEL, "gate/rows_gate.py": SHORT_SPEC})
    merge_base = r.git("rev-parse", "HEAD")
    r.branch("feature")
    r.checkout("main")
    tip = r.commit("maintainers tighten the rules", main_files)
    r.checkout("feature")
    return r, merge_base, tip


def test_a_branch_from_an_older_main_is_judged_by_the_tips_policy(make_repo) -> None:  # type: ignore[no-untyped-def]
    """The attack: main made an uncovered kernel block since the branch left it; the branch adds an
    uncovered kernel. Before, the merge base's policy (`uncovered: warn`) was in force: PASS."""
    r = make_repo("proj", {".gpu-gate.yml": POLICY + "uncovered: warn\n", "mylib/__init__.py": "",
                           "mylib/ops.py": EXACT, "csrc/rows.cu": KERNEL, "gate/rows_gate.py": SHORT_SPEC})
    merge_base = r.git("rev-parse", "HEAD")
    r.branch("feature")
    r.checkout("main")
    tip = r.commit("uncovered kernels block", {".gpu-gate.yml": POLICY + "uncovered: fail\n"})
    r.checkout("feature")
    r.commit("pull request", {"csrc/other.cu": KERNEL.replace("rows", "other")})
    code, text, results = _check(r)
    assert code == 1, text
    assert any(f["kind"] == "uncovered" and f["severity"] == "error" for f in _findings(results)), _findings(results)
    assert f"at base {tip[:12]}" in text
    assert f"the merge base {merge_base[:12]} is the base of the diff and of the differential runs" in text
    # The branch did not touch the policy: nothing it did is a rule change.
    assert not any(f["kind"].startswith("rules-") for f in _findings(results)), _findings(results)


def test_a_branch_from_an_older_main_is_judged_by_the_tips_spec(make_repo) -> None:  # type: ignore[no-untyped-def]
    """The attack: main widened the spec to rows of 200 since the branch left it; the branch's
    kernel drops everything past 64. Before, the merge base's spec (rows of 64 at most) judged: PASS."""
    r, _, tip = _branched_before(make_repo, {"gate/rows_gate.py": LONG_SPEC})
    r.commit("pull request", {"mylib/ops.py": TRUNCATED, "csrc/rows.cu": TUNED})
    code, text, results = _check(r)
    assert code == 1, text
    assert any(f["kind"] == "mismatch" for f in _findings(results)), _findings(results)
    # The narrower spec the branch still carries is not the branch's doing: no rule change.
    assert not any(f["kind"] == "rules-weakened" for f in _findings(results)), _findings(results)
    assert f"at base {tip[:12]}" in text


def test_a_correct_branch_from_an_older_main_passes_the_tips_rules(make_repo) -> None:  # type: ignore[no-untyped-def]
    """The twin: the same branch point, the same tightened spec on main, a correct kernel change."""
    r, merge_base, tip = _branched_before(make_repo, {"gate/rows_gate.py": LONG_SPEC})
    r.commit("pull request", {"mylib/ops.py": "def row_sum(x):\n    return x.double().flip(-1).sum(-1).to(x.dtype)\n",
                              "csrc/rows.cu": TUNED})
    code, text, results = _check(r)
    assert code == 0, text
    assert not any(f["kind"] in ("mismatch", "rules-weakened") for f in _findings(results)), _findings(results)
    assert results["rules"] == tip and results["base"] == merge_base
    # The report says whose rules judged, and that they are not the merge base's.
    assert f"rules of `{tip[:12]}`, the base branch's tip · policy" in text, text
    assert "the base branch's tip and the merge base" not in text


def _renamed(spec: str) -> str:
    return spec.replace("def row_sum_gate", "def sums_gate")


def test_a_renamed_spec_from_an_older_main_is_judged_by_the_tips(make_repo) -> None:  # type: ignore[no-untyped-def]
    """The attack: the branch renames the spec (file and function, git follows the file) and drops
    everything past 64; main widened the spec to rows of 200 since. The rename pairs the head's spec
    with the merge base's, whose version at the tip is in force: without following the pairing to the
    tip, the merge base's spec (rows of 64 at most) judged, and the branch passed."""
    r, _, tip = _branched_before(make_repo, {"gate/rows_gate.py": LONG_SPEC})
    r.git("mv", "gate/rows_gate.py", "gate/sums_gate.py")
    r.commit("pull request", {"gate/sums_gate.py": _renamed(SHORT_SPEC), "mylib/ops.py": TRUNCATED,
                              "csrc/rows.cu": TUNED})
    code, text, results = _check(r)
    assert code == 1, text
    assert any(f["kind"] == "mismatch" for f in _findings(results)), _findings(results)
    assert "is the base's row_sum_gate (gate/rows_gate.py): git renamed gate/rows_gate.py to gate/sums_gate.py" \
        in text, text
    assert not any(f["kind"] == "rules-weakened" for f in _findings(results)), _findings(results)
    assert f"at base {tip[:12]}" in text


def test_a_renamed_spec_from_an_older_main_passes_the_tips(make_repo) -> None:  # type: ignore[no-untyped-def]
    """The twin: the same rename, a correct kernel change: the tip's spec judges it and it passes."""
    r, _, _ = _branched_before(make_repo, {"gate/rows_gate.py": LONG_SPEC})
    r.git("mv", "gate/rows_gate.py", "gate/sums_gate.py")
    r.commit("pull request", {"gate/sums_gate.py": _renamed(SHORT_SPEC),
                              "mylib/ops.py": "def row_sum(x):\n    return x.double().flip(-1).sum(-1).to(x.dtype)\n",
                              "csrc/rows.cu": TUNED})
    code, text, results = _check(r)
    assert code == 0, text
    assert not any(f["kind"] in ("mismatch", "rules-weakened") for f in _findings(results)), _findings(results)
