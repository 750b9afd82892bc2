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

ROOT = Path(__file__).resolve().parent.parent
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


def test_there_is_a_ci_and_a_gate_workflow() -> None:
    assert {p.name for p in WORKFLOWS} >= {"ci.yml", "gate.yml"}


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
        assert perms.get("contents") == "read"
        writes = {k for k, v in perms.items() if v == "write"}
        allowed = {"checks", "pull-requests"} if name == "report" else set()
        assert writes <= allowed, f"{path.name}: job {name} may write {writes - allowed}"


@pytest.mark.parametrize("path", FILES, ids=lambda p: p.name)
def test_no_expression_is_expanded_inside_a_script(path: Path) -> None:
    for step in steps(load(path)):
        assert "${{" not in step.get("run", ""), f"{path.name}: step {step.get('name')!r} expands ${{{{ }}}} in run:"


def test_gate_workflow_installs_the_package_version() -> None:
    version = re.search(r'^version = "(.+)"', (ROOT / "pyproject.toml").read_text(), re.M)
    assert version and load(ROOT / ".github" / "workflows" / "gate.yml")["env"]["GPU_GATE_VERSION"] == version.group(1)


def test_gate_report_job_always_runs_and_fails_on_lost_shards() -> None:
    jobs = load(ROOT / ".github" / "workflows" / "gate.yml")["jobs"]
    report = jobs["report"]
    assert report["if"] == "always()" and set(report["needs"]) == {"plan", "check"}
    script = next(s["run"] for s in report["steps"] if s.get("id") == "report")
    assert "--expect-plan" in script and "CHECK_RESULT" in script
    assert jobs["check"]["runs-on"] == "${{ fromJSON(inputs.runner-labels) }}"
    assert jobs["check"]["strategy"]["fail-fast"] is False


@pytest.mark.skipif(not Path(ZIZMOR).exists(), reason="zizmor is not installed (pip install zizmor)")
def test_zizmor_finds_nothing() -> None:
    res = subprocess.run([ZIZMOR, "--offline", "--no-progress", "--persona", "pedantic", "--format", "plain",
                          "action.yml", ".github/workflows"], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stdout + res.stderr
    assert "No findings to report" in res.stdout + res.stderr
