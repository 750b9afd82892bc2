"""One real-shaped repository end to end under ``act``: a Triton package laid out as Liger-Kernel is.

``tests/liger_shaped`` is the base commit of a small library, ``fusekit``, with the layout of
Liger-Kernel (its code is the fixture's own): a ``src/`` layout installed with setuptools,
``fusekit/ops/__init__.py`` re-exporting the public autograd Function from ``ops/gated_silu.py``,
``@triton.jit`` kernels whose ``tl.constexpr`` parameters have no defaults (forward and backward), a
host wrapper that flattens the leading dims and launches one program per row with
``BLOCK = triton.next_power_of_2(width)``, a maintainer's
``.gpu-gate.yml`` for CPU-only runners, and a gate spec that calls the op as users do (``from
fusekit.ops import ...``) against a plain-torch reference.

The workflow is the one docs/github.md shows for such a repository: checkout without persisted
credentials, then the action with a runner interpreter that has torch and Triton but neither gpu-gate
nor the library, ``setup:`` installing the library in editable mode, and ``gpu: "false"`` (the
kernels run under the Triton interpreter). Pull request 7 first pushes a refactor of the *wrapper*
that counts only the first leading dim as rows (the kernels are untouched), then a second commit that
fixes it. The first run must be red, with one sticky comment and a failing check run annotated where
a reviewer looks; the second must be green, edit that same comment and pass the check run of the new
head. Everything GitHub sees goes through the schema-checking fake (tests/github_server).
"""
from __future__ import annotations

import json
import shutil
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

pytest.importorskip("triton")  # the kernels run under the Triton interpreter

from github_server import FakeGitHub  # noqa: E402
from gpu_gate.github.comment import marker  # noqa: E402
from test_action_act import copy_action, git, run_act, runner_python  # noqa: E402 - skips without act

pytestmark = pytest.mark.slow

FIXTURE = Path(__file__).resolve().parents[1] / "liger_shaped"
KERNEL_FILE = "src/fusekit/ops/gated_silu.py"
SPEC_FILE = "gate/gated_silu_gate.py"
SPEC_ID = f"{SPEC_FILE}::gated_silu_gate"
CHECKOUT = "actions/checkout@11bd71901bbe5b1630ceea73d27597364c9af683"
# The runners here are offline: pip's default build isolation would download setuptools into a fresh
# build environment, so the build uses the interpreter's own setuptools (--no-build-isolation), and
# --no-deps leaves the runner's torch and Triton as they are (docs/github.md's `pip install --no-deps
# -e .`). `python -m pip`: the runner's venv has pip's module (from the stack it sees) but no pip script,
# and a bare `pip` further down PATH would install into another environment.
SETUP = "python -m pip install --no-build-isolation --no-deps -e ."
WORKFLOW = "gpu-gate"  # the sticky comment's key is WORKFLOW/JOB
JOB = "triton"

# The wrapper as the library has it, the pull request's refactor ("read the sizes before
# flattening"), which launches one program per *batch* row: with (bsz, seq_len, size) inputs every
# row past the first bsz is never written. The fix keeps the refactor and counts every leading dim.
WRAPPER = """    shape = gate.shape

    width = shape[-1]
    gate = gate.view(-1, width)
    up = up.view(-1, width)
    out = torch.empty_like(gate)
    rows = gate.shape[0]
"""
BUG_LINE = "    rows, width = shape[0], shape[-1]\n"
BROKEN = f"""    shape = gate.shape
{BUG_LINE}
    gate = gate.view(-1, width)
    up = up.view(-1, width)
    out = torch.empty_like(gate)
"""
FIXED = """    shape = gate.shape
    width = shape[-1]
    rows = gate.numel() // width  # one program per row: every leading dim counts

    gate = gate.view(-1, width)
    up = up.view(-1, width)
    out = torch.empty_like(gate)
"""

RECORD = """import json, os, shutil
out = os.environ["GG_TEST_OUT"]
keys = ["VERDICT", "EXIT_CODE", "COUNTS", "REPORT_DIR"]
json.dump({k: os.environ.get(k, "") for k in keys}, open(out + "/outputs.json", "w"))
if os.environ["REPORT_DIR"]:
    shutil.copytree(os.environ["REPORT_DIR"], out + "/report", dirs_exist_ok=True)
"""


def workflow(python: str) -> dict[str, Any]:
    """.github/workflows/gpu-gate.yml of the library (a CPU-only runner: gpu "false", no artifact)."""
    steps = [
        {"uses": CHECKOUT, "with": {"fetch-depth": 0, "persist-credentials": False}},
        {"id": "gate", "uses": "./.gpu-gate-action",
         "with": {"python": python, "gpu": "false", "artifact": "", "setup": SETUP}},
        {"name": "record outputs", "if": "always()", "shell": "bash",
         "env": {"VERDICT": "${{ steps.gate.outputs.verdict }}", "EXIT_CODE": "${{ steps.gate.outputs.exit-code }}",
                 "COUNTS": "${{ steps.gate.outputs.counts }}",
                 "REPORT_DIR": "${{ steps.gate.outputs.report-dir }}"},
         "run": f"{python} - <<'PY'\n{RECORD}PY"},
    ]
    job = {"runs-on": ["self-hosted", "gpu"],
           "permissions": {"contents": "read", "checks": "write", "pull-requests": "write"},
           "steps": steps}
    return {"name": WORKFLOW, "on": "pull_request", "permissions": {}, "jobs": {JOB: job}}


def pr_event(path: Path, base: str, head: str) -> Path:
    repo = {"full_name": "octo/kernels"}
    path.write_text(json.dumps({
        "action": "synchronize", "number": 7, "repository": repo,
        "pull_request": {"number": 7, "head": {"sha": head, "ref": "feature", "repo": repo},
                         "base": {"sha": base, "ref": "main", "repo": repo}}}))
    return path


def line_of(text: str, needle: str) -> int:
    """1-based line of the (only) line that contains ``needle``."""
    (line,) = [i for i, t in enumerate(text.splitlines(), 1) if needle in t]
    return line


def probe(python: str, cwd: Path, *path: Path) -> str:
    """What the runner's interpreter makes of the library, with ``path`` first on sys.path."""
    code = ("import importlib.metadata as m, sys\n"
            "sys.path[:0] = sys.argv[1:]\n"
            "try:\n import fusekit\nexcept Exception as e: print('missing', type(e).__name__)\n"
            "else: print('installed', fusekit.__version__, m.distribution('fusekit').version)")
    return subprocess.run([python, "-P", "-c", code, *map(str, path)], capture_output=True, text=True,
                          cwd=cwd).stdout.strip()


@pytest.fixture
def gh() -> Iterator[FakeGitHub]:
    with FakeGitHub() as server:
        yield server


@pytest.fixture
def liger_repo(tmp_path: Path) -> tuple[Path, str, str]:
    """(repo, python, base sha): tests/liger_shaped committed on main, the action beside it, the
    workflow naming the runner's interpreter; the work tree is on branch ``feature`` at the base."""
    repo = tmp_path / "repo"
    shutil.copytree(FIXTURE, repo, ignore=shutil.ignore_patterns("__pycache__", "*.egg-info", "build"))
    python = runner_python(tmp_path)
    copy_action(repo / ".gpu-gate-action")
    wf = repo / ".github" / "workflows"
    wf.mkdir(parents=True)
    (wf / "gpu-gate.yml").write_text(yaml.safe_dump(workflow(python), sort_keys=False))
    git(repo, "init", "-q", "-b", "main")
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "fusekit: gated SiLU forward and backward in Triton")
    base = git(repo, "rev-parse", "HEAD")
    git(repo, "checkout", "-q", "-b", "feature")
    return repo, python, base


def push(repo: Path, text: str, message: str) -> str:
    """Commit ``text`` as the kernel file on ``feature``; the new head's sha."""
    (repo / KERNEL_FILE).write_text(text)
    git(repo, "commit", "-q", "-am", message)
    return git(repo, "rev-parse", "HEAD")


def gate_comments(gh: FakeGitHub) -> list[dict[str, Any]]:
    return [c for c in gh.comments[7] if c["body"].startswith(marker(f"{WORKFLOW}/{JOB}"))]


def equivalence(out: Path) -> dict[str, Any]:
    results = json.loads((out / "report" / "results.json").read_text())
    (job,) = [r for r in results["results"] if r["check"] == "equivalence"]
    return job


def test_liger_shaped_pr_red_on_a_broken_wrapper_then_green_on_the_fix_under_act(
        liger_repo, gh: FakeGitHub, tmp_path: Path) -> None:
    """Two pushes to one pull request, as a Liger-style maintainer would see them.

    Red: the wrapper's bug (the kernels did not change) is found by the spec through the package's
    re-export, the job fails, one sticky comment names the failure and its repro, and the failing
    check run is annotated on the wrapper's file and on the spec. Green: the fix edits that same
    comment (no second one) and the new head's check run succeeds.

    Install: the runner's interpreter has neither gpu-gate nor fusekit before the first run; the
    spec could import fusekit (whose ``__init__`` reads its installed version) only because
    ``setup:`` installed it, sandboxed, into a venv of its own made from that interpreter, whose
    python the workers run with; the runner's interpreter still lacks it afterwards.
    """
    repo, python, base = liger_repo
    original = (repo / KERNEL_FILE).read_text()
    assert original.count(WRAPPER) == 1, "the fixture's wrapper changed: update WRAPPER"
    assert probe(python, tmp_path) == "missing ModuleNotFoundError", "the runner's python lacks fusekit before setup"
    # gpu-gate puts src/ first on the spec's sys.path (the policy's python_path, from pyproject.toml), but
    # the package reads its own installed version: from the sources alone it does not import.
    assert probe(python, tmp_path, repo / "src") == "missing PackageNotFoundError"
    gh.add_comment(7, "Thanks! Let's see what the gate says.", "maintainer", "MEMBER")

    # --- push 1: the refactor breaks the wrapper ------------------------------------------------
    broken = original.replace(WRAPPER, BROKEN)
    head1 = push(repo, broken, "gated_silu: read the sizes before flattening")
    started = time.monotonic()
    red = run_act(repo, pr_event(tmp_path / "event1.json", base, head1), gh, "gpu-gate.yml",
                  tmp_path / "run1", tmp_path / "home")
    red_s = time.monotonic() - started
    log = red.stdout + red.stderr
    assert (tmp_path / "run1" / "outputs.json").exists(), log[-8000:]
    outputs = json.loads((tmp_path / "run1" / "outputs.json").read_text())
    assert (outputs["VERDICT"], outputs["EXIT_CODE"]) == ("failed", "1"), log[-8000:]
    assert red.returncode != 0 and "gpu-gate failed (exit code 1)" in log, "the job itself is red"
    assert "Successfully installed fusekit-0.1.0" in log, "setup ran pip install -e . in the job"
    assert "setup: sandboxed by bubblewrap" in log, "setup ran in its sandbox"
    assert probe(python, tmp_path) == "missing ModuleNotFoundError", \
        "setup installed fusekit into a venv of its own: the runner's python (gpu-gate's judge) is untouched"

    job = equivalence(tmp_path / "run1")
    assert job["spec"] == SPEC_ID and job["status"] == "failed", job
    assert job["kernels"] == [KERNEL_FILE], "the spec covers the changed file through fusekit.ops' re-export"
    errors = [f for f in job["findings"] if f["severity"] == "error"]
    assert errors and {f["kind"] for f in errors} <= {"nan", "mismatch"}, [f["message"] for f in errors]
    assert "spec-import-error" not in {f["kind"] for f in job["findings"]}
    assert any(f["kind"] == "differential" and "1 new" in f["message"] for f in job["findings"]), \
        "the base's wrapper passes the same cases: the failure is the pull request's"

    (comment,) = gate_comments(gh)
    comment_id, red_body = comment["id"], comment["body"]  # the fake edits the same dict in place
    assert len(gh.comments[7]) == 2, "the maintainer's comment and gpu-gate's one"
    assert "gpu-gate: FAILED" in red_body and "gpu-gate repro " + SPEC_ID in red_body, red_body
    assert "#artifacts" not in red_body, "artifact: \"\" uploads no report: no link to one"

    (run1,) = gh.check_runs.values()
    assert (run1["head_sha"], run1["conclusion"]) == (head1, "failure")
    failures = {(a["path"], a["start_line"]) for a in gh.annotations[run1["id"]] if a["annotation_level"] == "failure"}
    spec_line = line_of((repo / SPEC_FILE).read_text(), "@gg.spec(")
    bug_line = line_of(broken, BUG_LINE.strip())
    forward_def = line_of(broken, "def _gated_silu_fwd(")  # its @triton.jit is the line above
    # An equivalence failure names no line of its own: gpu-gate places it first on the lines this
    # change wrote in the files the spec runs (the diff view shows annotations there), then on the
    # spec's decorator and the judged kernels' definitions (gpu_gate/report/locate.py).
    assert (KERNEL_FILE, bug_line) in failures, failures
    assert (SPEC_FILE, spec_line) in failures, failures
    assert {(KERNEL_FILE, forward_def - 1), (KERNEL_FILE, forward_def)} & failures, failures
    assert {path for path, _ in failures} == {SPEC_FILE, KERNEL_FILE}, failures
    (on_bug,) = [a for a in gh.annotations[run1["id"]] if (a["path"], a["start_line"]) == (KERNEL_FILE, bug_line)]
    assert on_bug["title"] == f"gpu-gate equivalence: {errors[0]['kind']} ({SPEC_ID})", on_bug
    assert on_bug["message"].startswith(f"changed line {bug_line}"), on_bug["message"][:200]
    assert "gpu-gate repro " + SPEC_ID in on_bug.get("raw_details", ""), "the annotation says how to reproduce"

    # --- push 2: the fix -------------------------------------------------------------------------
    head2 = push(repo, original.replace(WRAPPER, FIXED), "gated_silu: every leading dim is a row")
    started = time.monotonic()
    green = run_act(repo, pr_event(tmp_path / "event2.json", base, head2), gh, "gpu-gate.yml",
                    tmp_path / "run2", tmp_path / "home")
    green_s = time.monotonic() - started
    log = green.stdout + green.stderr
    outputs = json.loads((tmp_path / "run2" / "outputs.json").read_text())
    assert (outputs["VERDICT"], outputs["EXIT_CODE"]) == ("passed", "0"), log[-8000:]
    assert green.returncode == 0, log[-8000:]
    job = equivalence(tmp_path / "run2")
    assert job["status"] == "passed" and job["cases"] >= 6, "the fix is judged, not skipped"

    (edited,) = gate_comments(gh)
    assert edited["id"] == comment_id and len(gh.comments[7]) == 2, "the same comment, edited in place"
    assert len(gh.calls("issues/create-comment", ok_only=True)) == 1
    assert len(gh.calls("issues/update-comment", ok_only=True)) == 1
    assert "gpu-gate: PASSED" in edited["body"] and "gpu-gate repro" not in edited["body"], edited["body"]
    runs = [r for r in gh.check_runs.values() if r["head_sha"] == head2]
    assert [r["conclusion"] for r in runs] == ["success"]
    assert not [a for a in gh.annotations[runs[0]["id"]] if a["annotation_level"] == "failure"]
    assert gh.check_runs[run1["id"]]["conclusion"] == "failure", "the old head's run stays as it was"
    assert gh.violations == []
    print(f"act runs: red {red_s:.1f}s, green {green_s:.1f}s")
