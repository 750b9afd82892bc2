"""docs/guide/own-runner.md's workflow for a persistent, repository-level GPU runner, under ``act`` as written
(placeholders filled in, this machine's CPU), on a pull request whose code tries to leave something
behind for the next job: a file in the runner's home, in ``/tmp`` and in ``~/.cache``, and a process.

The runner here is act's host mode with a home of the test's own, as a persistent machine's user
would have: afterwards none of it is there and gpu-gate's job directories are gone. The process is
also what the verdict says: the kernel is correct, and the pull request is red for what its code
tried to leave running (``escaped-process``), and for nothing else.
"""
from __future__ import annotations

import json
import os
import re
import shutil
import tempfile
import time
from pathlib import Path

import pytest
import yaml

import test_action_act as act
from github_server import FakeGitHub

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]
GUIDE = ROOT / "docs" / "guide" / "own-runner.md"
FENCE = re.compile(r"^```ya?ml[ \t]*\n(?P<body>.*?)^```[ \t]*$", re.M | re.S)
SHA = "0123456789abcdef0123456789abcdef01234567"

# Runs in the check job's sandbox, on import: each attempt to leave state is allowed to fail.
SPEC = '''import os
import pathlib
import subprocess
import sys

import gpu_gate as gg

CANARY = {canary!r}
for target in (pathlib.Path.home() / ("planted-by-spec-" + CANARY), pathlib.Path("/tmp") / ("planted-by-spec-" + CANARY)):
    try:
        target.write_text("left behind")
    except OSError:
        pass
# a process that would outlive the job, in a session of its own
subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)", "leftover-" + CANARY],
                 start_new_session=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


@gg.spec(
    dims={{"n": gg.Dim(1, 64)}},
    inputs={{"x": gg.Tensor(("n",), dtypes=["float32"]), "y": gg.Tensor(("n",), dtype="like:x")}},
    reference=lambda x, y: x + y,
    covers=["csrc/add.cu"],
    checks=["equivalence"],
)
def add_gate(x, y):
    return x + y
'''
# The pull request's setup: a cache entry where a later job's pip would find it, and one in the job's own.
SETUP = ('mkdir -p ~/.cache/pip && echo planted > ~/.cache/pip/planted-by-setup-{canary} || true\n'
         'mkdir -p "$XDG_CACHE_HOME" && echo mine > "$XDG_CACHE_HOME/setup-{canary}"\n'
         'echo "setup cache: $XDG_CACHE_HOME"')
POLICY = """version: 1
runner: {sandbox: required}
checks: {equivalence: {cases: 4}, determinism: off, memcheck: off, racecheck: off, synccheck: off, initcheck: off}
"""


def guide_workflow() -> dict:
    blocks = [yaml.safe_load(m.group("body")) for m in FENCE.finditer(GUIDE.read_text().split("## The workflow", 1)[1])]
    (workflow,) = [b for b in blocks if isinstance(b, dict) and "jobs" in b]
    workflow["on"] = workflow.pop(True)
    return workflow


def for_act(workflow: dict, python: str, setup: str) -> dict:
    (job,) = workflow["jobs"].values()
    assert job["uses"] == f"<org>/gpu-gate/.github/workflows/gate.yml@<full-40-hex-sha>"
    job["uses"] = "./.github/workflows/gate.yml"
    job["with"].update({"gpu-gate-repository": act.GPU_GATE_REPO, "gpu-gate-ref": act.GPU_GATE_REF, "python": python,
                        "hosted-python": python, "gpu": False, "setup": setup})
    return workflow


def processes_with(marker: str) -> list[str]:
    found = []
    for cmdline in Path("/proc").glob("[0-9]*/cmdline"):
        try:
            text = cmdline.read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if marker in text:
            found.append(text)
    return found


def test_the_guides_workflow_leaves_nothing_of_a_pull_request_on_a_persistent_runner(tmp_path: Path) -> None:
    canary = os.urandom(5).hex()
    repo = tmp_path / "repo"
    (repo / "csrc").mkdir(parents=True)
    (repo / "gate").mkdir()
    act.git(repo, "init", "-q", "-b", "main")
    (repo / "csrc" / "add.cu").write_text(act.GOOD)
    (repo / ".gpu-gate.yml").write_text(POLICY)
    wf = repo / ".github" / "workflows"
    wf.mkdir(parents=True)
    shutil.copy(ROOT / ".github" / "workflows" / "gate.yml", wf / "gate.yml")
    python = act.runner_python(tmp_path)
    workflow = for_act(guide_workflow(), python, SETUP.format(canary=canary))
    assert workflow["jobs"]["gpu-gate"]["with"]["setup-cache"] == "job"
    (wf / "gpu-gate.yml").write_text(yaml.safe_dump(workflow, sort_keys=False))
    act.git(repo, "add", "-A")
    act.git(repo, "commit", "-q", "-m", "base")
    base = act.git(repo, "rev-parse", "HEAD")
    act.git(repo, "checkout", "-q", "-b", "feature")
    (repo / "csrc" / "add.cu").write_text(act.GOOD.replace("int i =", "const int i ="))
    (repo / "gate" / "add_gate.py").write_text(SPEC.format(canary=canary))
    act.git(repo, "add", "-A")
    act.git(repo, "commit", "-q", "-m", "const index, a spec")
    head = act.git(repo, "rev-parse", "HEAD")
    event = tmp_path / "event.json"
    event.write_text(json.dumps({"number": 7, "repository": {"full_name": "octo/kernels"},
                                 "pull_request": {"number": 7, "head": {"sha": head, "ref": "feature",
                                                                        "repo": {"full_name": "octo/kernels",
                                                                                 "fork": False}},
                                                  "base": {"sha": base, "ref": "main"}}}))
    home, work = tmp_path / "home", tmp_path / "gpu-gate-jobs"
    work.mkdir()
    with FakeGitHub() as gh:
        res = act.run_act(repo, event, gh, "gpu-gate.yml", tmp_path / "run", home,
                          extra=("--env", f"GPU_GATE_WORK_DIR={work}"))
        log = res.stdout + res.stderr
        (run,) = gh.check_runs.values()
        assert run["head_sha"] == head and run["conclusion"] == "failure", log[-6000:]
        assert res.returncode != 0 and gh.violations == []
    results = json.loads(next((tmp_path / "run" / "artifacts").glob("gpu-gate-results-*/results.json")).read_text())
    (equivalence,) = [r for r in results["results"] if r["check"] == "equivalence"]
    errors = [f for f in equivalence["findings"] if f["severity"] == "error"]
    assert [f["kind"] for f in errors] == ["escaped-process"], errors
    assert "killed with the sandbox's PID namespace" in errors[0]["message"]
    assert equivalence["cases"] == 4 and not [f for f in equivalence["findings"] if f["kind"] == "mismatch"]
    assert "setup: sandboxed by bubblewrap" in log
    time.sleep(2)  # a process that survived would still be asleep
    assert processes_with("leftover-" + canary) == []
    assert not list(home.rglob(f"planted-by-spec-{canary}")) and not list(home.rglob(f"planted-by-setup-{canary}"))
    assert not (Path(tempfile.gettempdir()) / f"planted-by-spec-{canary}").exists()
    assert list(work.iterdir()) == [], "gpu-gate's job directories are gone"
    # setup's caches went to the job's own directory in $RUNNER_TEMP (act keeps that under its ~/.cache/act)
    said = re.search(r"setup cache: (\S+)", log)
    assert said and said.group(1).endswith("/tmp/gpu-gate-setup-cache"), log[-4000:]
    assert Path(said.group(1), f"setup-{canary}").read_text() == "mine\n"
