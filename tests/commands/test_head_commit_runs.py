"""Exactly the head commit runs: with ``--head`` the workers see a pristine export of that commit, and
the result cache hashes that commit's files, whatever the work tree holds. Without ``--head`` (local
use) the work tree runs, uncommitted files included. What a setup step built is taken into the export
only from the paths the policy names (``setup_outputs``), and the report lists them.

Real git repositories, the real CLI, sandboxed workers, on the CPU.
"""
from __future__ import annotations

import json
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
  equivalence: {cases: 6, growth: false, shrink: false, seed: 9}
"""

EXACT = "def row_sum(x):\n    return x.double().sum(-1).to(x.dtype)\n"
TRUNCATED = "def row_sum(x):\n    return x[..., :64].double().sum(-1).to(x.dtype)\n"
KERNEL = "__global__ void rows(const float* x, float* y, int n) { /* row sums */ }\n"
# The pull request's kernel: a token changes (a comment alone is no change to judge).
TUNED = KERNEL + "static const int tuned_ = 1;\n"
SPEC = """\
import gpu_gate as gg
from mylib.ops import row_sum


@gg.spec(dims={"rows": gg.Dim(1, 16), "n": gg.Dim(1, 200, reduction=True)},
         inputs={"x": gg.Tensor(("rows", "n"), dtypes=["float32"])},
         reference=lambda x: x.sum(-1), covers=["csrc/rows.cu"], devices=["cuda", "cpu"])
def row_sum_gate(x):
    return row_sum(x)
"""


def _repo(make_repo, policy: str = POLICY, ops: str = EXACT) -> GitRepo:  # type: ignore[no-untyped-def]
    r = make_repo("proj", {".gpu-gate.yml": policy, ".gitignore": ".gpu-gate/\nmylib/_built.py\n",
                           "mylib/__init__.py": "", "mylib/ops.py": ops, "csrc/rows.cu": KERNEL,
                           "gate/rows_gate.py": SPEC})
    r.branch("feature")
    return r


def _check(r: GitRepo, *args: str) -> tuple[int, str, dict]:  # type: ignore[type-arg]
    p = gate("check", "--base", "main", "--cpu", *args, cwd=r.path)
    out = r.path / ".gpu-gate" / "out"
    report = (out / "report.md").read_text() if (out / "report.md").exists() else ""
    results = json.loads((out / "results.json").read_text()) if (out / "results.json").exists() else {}
    return p.returncode, p.stdout + p.stderr + report, results


def _equivalence(results: dict) -> dict:  # type: ignore[type-arg]
    return next(r for r in results["results"] if r["check"] == "equivalence")


def test_head_runs_the_commit_not_the_work_tree(make_repo) -> None:  # type: ignore[no-untyped-def]
    """The attack: the head commit has the buggy kernel; the work tree holds the correct one (what a
    pull request's own build step can arrange). Before, with the head checked out, the work tree ran
    and the cache hashed its bytes: the buggy commit passed."""
    r = _repo(make_repo)
    head = r.commit("pull request", {"mylib/ops.py": TRUNCATED,
                                     "csrc/rows.cu": TUNED})
    r.write("mylib/ops.py", EXACT)  # not committed
    code, text, results = _check(r, "--head", "feature")
    assert code == 1, text
    assert any(f["kind"] == "mismatch" for f in _equivalence(results)["findings"]), text
    assert f"the workers ran an export of the head commit {head[:12]}" in text


def test_the_cache_is_keyed_by_the_head_commits_files(make_repo) -> None:  # type: ignore[no-untyped-def]
    """A local run on the (correct) work tree stores a pass; the head commit's buggy kernel then gets
    no cached pass from it: its key is computed from the commit's files."""
    r = _repo(make_repo)
    r.commit("pull request", {"mylib/ops.py": TRUNCATED, "csrc/rows.cu": TUNED})
    r.write("mylib/ops.py", EXACT)
    code, text, _ = _check(r)
    assert code == 0, text
    code, text, results = _check(r, "--head", "HEAD")
    assert code == 1, text
    assert _equivalence(results).get("cached_from") is None


def test_without_head_the_work_tree_runs(make_repo) -> None:  # type: ignore[no-untyped-def]
    """The twin: a local `check` without --head judges the uncommitted fix, and says so."""
    r = _repo(make_repo)
    r.commit("pull request", {"mylib/ops.py": TRUNCATED, "csrc/rows.cu": TUNED})
    r.write("mylib/ops.py", EXACT)
    code, text, _ = _check(r)
    assert code == 0, text
    assert "the work tree (uncommitted and untracked files included" in text


# --- what a setup step built -----------------------------------------------------------------

BUILT_OPS = "from mylib._built import row_sum  # made by the setup step\n"
BUILT = EXACT


def _built_repo(make_repo, policy: str) -> tuple[GitRepo, str]:  # type: ignore[no-untyped-def]
    r = _repo(make_repo, policy, ops=EXACT)
    head = r.commit("pull request", {"mylib/ops.py": BUILT_OPS,
                                     "csrc/rows.cu": TUNED})
    r.write("mylib/_built.py", BUILT)  # untracked: what `setup:` built in the work tree
    return r, head


def test_a_setup_output_the_policy_does_not_name_is_not_taken(make_repo) -> None:  # type: ignore[no-untyped-def]
    r, _ = _built_repo(make_repo, POLICY)
    code, text, results = _check(r, "--head", "HEAD")
    assert code == 1, text
    assert any(f["kind"] == "spec-import-error" and "_built" in f["message"]
               for f in _equivalence(results)["findings"]), text


def test_a_setup_output_the_policy_names_is_taken_and_listed(make_repo) -> None:  # type: ignore[no-untyped-def]
    r, _ = _built_repo(make_repo, POLICY + 'setup_outputs: ["mylib/_built.py", "mylib/ops.py"]\n')
    r.write("mylib/ops.py", BUILT_OPS + "raise RuntimeError('the work tree, not the commit')\n")
    code, text, results = _check(r, "--head", "HEAD")
    assert code == 0, text
    notes = "\n".join(results["notes"])
    assert "setup outputs taken from the work tree: mylib/_built.py (sha256 " in notes
    # a named path that the commit tracks keeps the commit's bytes
    assert "not taken, since the head commit has it: mylib/ops.py" in notes
    assert "mylib/\\_built.py" in text  # the report lists it too


def test_setup_outputs_must_be_repository_relative(make_repo) -> None:  # type: ignore[no-untyped-def]
    r = _repo(make_repo, POLICY + 'setup_outputs: ["build/*.so", "../outside/*.so"]\n')
    p = gate("check", "--base", "main", "--cpu", cwd=r.path)
    assert p.returncode == 2, p.stdout + p.stderr
    assert ".gpu-gate.yml:13:31: setup_outputs[1]: '../outside/*.so' is not a path inside the repository" in p.stderr


# --- the export itself, without a gate run ---------------------------------------------------


def test_the_export_takes_only_named_untracked_regular_files(make_repo, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    from gpu_gate.commands.head_tree import head_tree

    r = make_repo("proj", {"mylib/__init__.py": "", "mylib/ops.py": EXACT, ".gitignore": "build/\n*.so\nout/\n"})
    head = r.git("rev-parse", "HEAD")
    r.write("mylib/ops.py", TRUNCATED)  # a tracked file rewritten in the work tree
    r.write("mylib/_C.so", b"\x7fELF built")
    r.write("build/lib/other.so", b"\x7fELF not named")
    r.write("out/stale.so", b"\x7fELF the report directory")
    (r.path / "mylib" / "_link.so").symlink_to(tmp_path / "elsewhere.so")
    with head_tree(r.path, head, ["mylib/*.so", "mylib/ops.py", "out/**"], leave_out=[r.path / "out"]) as tree:
        assert tree.path != r.path and (tree.path / "mylib" / "ops.py").read_text() == EXACT
        assert [t.path for t in tree.taken] == ["mylib/_C.so"]
        assert (tree.path / "mylib" / "_C.so").read_bytes() == b"\x7fELF built"
        assert tree.kept == ["mylib/ops.py"] and tree.links == ["mylib/_link.so"]
        assert not (tree.path / "build").exists() and not (tree.path / "out").exists()
        assert tree.fingerprint() == {"mylib/_C.so": tree.taken[0].sha256}
        made = tree.path
    assert not made.exists() and r.git("worktree", "list").count("\n") == 0


def test_without_a_head_the_work_tree_is_the_tree(make_repo) -> None:  # type: ignore[no-untyped-def]
    from gpu_gate.commands.head_tree import head_tree

    r = make_repo("proj", {"a.py": "x = 1\n"})
    with head_tree(r.path, None, ["*.so"]) as tree:
        assert tree.path == r.path and not tree.exported and tree.notes() == []


def test_making_the_export_runs_no_hook(make_repo, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    """A post-checkout hook would be code run by the gate itself, outside any sandbox."""
    from gpu_gate.commands.head_tree import head_tree

    r = make_repo("proj", {"a.py": "x = 1\n"})
    ran = tmp_path / "hook-ran"
    hook = r.path / ".git" / "hooks" / "post-checkout"
    hook.write_text(f"#!/bin/sh\ntouch {ran}\n")
    hook.chmod(0o755)
    r.git("checkout", "-q", "-b", "probe")  # the hook works as a hook
    assert ran.exists()
    ran.unlink()
    with head_tree(r.path, r.git("rev-parse", "HEAD"), []) as tree:
        assert (tree.path / "a.py").exists()
    assert not ran.exists()


def test_the_work_tree_is_out_of_the_jobs_sight(make_repo) -> None:  # type: ignore[no-untyped-def]
    """What a build left in the work tree and the policy does not name stays out of the export's
    jobs even when a path into the work tree reaches their sys.path (an editable install's .pth does
    that; PYTHONPATH here): in their sandbox the work tree is hidden."""
    from gpu_gate.executor import sandbox

    if sandbox.probe().kind != "bwrap":
        pytest.skip(f"bubblewrap hides directories; this machine's sandbox: {sandbox.probe().detail}")
    r = _repo(make_repo)
    r.commit("pull request", {"mylib/ops.py": "from _planted import row_sum  # built in the work tree\n",
                              "csrc/rows.cu": TUNED})
    r.write("_planted.py", EXACT)  # untracked, not named by setup_outputs
    p = gate("check", "--base", "main", "--cpu", "--head", "HEAD", cwd=r.path, env={"PYTHONPATH": str(r.path)})
    assert p.returncode == 1, p.stdout + p.stderr
    results = json.loads((r.path / ".gpu-gate" / "out" / "results.json").read_text())
    assert any(f["kind"] == "spec-import-error" and "_planted" in f["message"]
               for f in _equivalence(results)["findings"]), p.stdout
