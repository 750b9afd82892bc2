"""Every YAML example in the docs parses; every workflow among them passes actionlint and zizmor; every
policy among them validates; and the two workflows a team copies first run under ``act`` as written
(with the placeholders filled in and the GPU requirement off, as on this machine)."""
from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
FENCE = re.compile(r"^(?P<indent>[ \t]*)```ya?ml[ \t]*\n(?P<body>.*?)^(?P=indent)```[ \t]*$", re.M | re.S)
BIN = Path(sys.executable).parent
ACTIONLINT = shutil.which("actionlint") or str(BIN / "actionlint")
ZIZMOR = shutil.which("zizmor") or str(BIN / "zizmor")
SHA = "0123456789abcdef0123456789abcdef01234567"
PLACEHOLDERS = {"<org>": "your-org", "<full-40-hex-sha>": SHA, "<64-hex-digest>": "ab" * 32}


def blocks() -> list[tuple[str, str]]:
    """(id "file:line", the block's text, dedented) of every fenced YAML block in the docs."""
    out = []
    for doc in DOCS:
        text = doc.read_text()
        for m in FENCE.finditer(text):
            indent = len(m.group("indent"))
            body = "\n".join(line[indent:] for line in m.group("body").splitlines())
            out.append((f"{doc.relative_to(ROOT)}:{text.count(chr(10), 0, m.start()) + 1}", body))
    return out


BLOCKS = blocks()


def filled(body: str) -> str:
    for placeholder, value in PLACEHOLDERS.items():
        body = body.replace(placeholder, value)
    return body


def load(body: str) -> Any:
    data = yaml.safe_load(filled(body))
    if isinstance(data, dict) and True in data:  # PyYAML reads the key `on` as True
        data["on"] = data.pop(True)
    return data


def is_workflow(data: Any) -> bool:
    return isinstance(data, dict) and "jobs" in data


def test_the_docs_have_examples() -> None:
    workflows = [b for b in BLOCKS if is_workflow(load(b[1]))]
    assert len(workflows) >= 6, [b[0] for b in BLOCKS]


@pytest.mark.parametrize("where,body", BLOCKS, ids=[b[0] for b in BLOCKS])
def test_every_yaml_example_parses(where: str, body: str) -> None:
    assert isinstance(load(body), dict), f"{where}: not a YAML mapping"


WORKFLOWS = [b for b in BLOCKS if is_workflow(load(b[1]))]


@pytest.mark.parametrize("where,body", WORKFLOWS, ids=[b[0] for b in WORKFLOWS])
def test_every_workflow_example_passes_actionlint_and_zizmor(where: str, body: str, tmp_path: Path) -> None:
    assert Path(ACTIONLINT).exists() and Path(ZIZMOR).exists(), "pip install -e '.[test]' brings both"
    wf = tmp_path / ".github" / "workflows" / "example.yml"
    wf.parent.mkdir(parents=True)
    wf.write_text(filled(body))
    # `gpu` is the docs' label for self-hosted GPU runners, as a repository would declare it.
    config = tmp_path / ".github" / "actionlint.yaml"
    config.write_text("self-hosted-runner:\n  labels: [gpu]\n")
    lint = subprocess.run([ACTIONLINT, "-no-color", "-config-file", str(config), str(wf)], cwd=tmp_path, capture_output=True, text=True,
                          timeout=120)
    assert lint.returncode == 0, f"{where}:\n{lint.stdout}{lint.stderr}"
    # The regular persona: every security audit; the pedantic one adds style (names, comments on permissions).
    audit = subprocess.run([ZIZMOR, "--offline", "--no-progress", "--format", "plain",
                            str(wf)], cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert audit.returncode == 0, f"{where}:\n{audit.stdout}{audit.stderr}"


POLICY_KEYS = {"version", "extends", "kernels", "specs", "uncovered", "not_run", "refusals", "checks", "runner",
               "cuda", "cache", "reports"}
POLICIES = [b for b in BLOCKS if not is_workflow(load(b[1])) and set(load(b[1])) <= POLICY_KEYS]


@pytest.mark.parametrize("where,body", POLICIES, ids=[b[0] for b in POLICIES])
def test_every_policy_example_validates(where: str, body: str, tmp_path: Path) -> None:
    policy = tmp_path / ".gpu-gate.yml"
    policy.write_text(body if "version:" in body else "version: 1\n" + body)
    res = subprocess.run([sys.executable, "-m", "gpu_gate.cli", "validate-policy", str(policy)], capture_output=True,
                         text=True, timeout=120)
    assert res.returncode == 0, f"{where}: {res.stdout}{res.stderr}"


def test_no_example_label_gate_runs_later_pushes_unreviewed() -> None:
    """A label on a pull request survives its next push: a gate on `labeled` runs that push unreviewed."""
    for where, body in WORKFLOWS:
        text = filled(body)
        assert "labels.*.name" not in text and "labeled" not in text, where


# --- The first two workflows a team copies, under act -----------------------------------------

pytest.importorskip("github_server")
from github_server import FakeGitHub  # noqa: E402

import test_action_act as act  # noqa: E402


def example(title: str) -> dict[str, Any]:
    """The first workflow example after the heading ``title`` in docs/github.md."""
    text = (ROOT / "docs" / "github.md").read_text()
    start = text.index(f"\n## {title}\n")
    m = FENCE.search(text, start)
    assert m
    return load(m.group("body"))


def for_act(doc: dict[str, Any], python: str) -> dict[str, Any]:
    """The example with the action and the workflow taken from this checkout, on this machine's CPU."""
    text = json.dumps(doc)
    text = text.replace(f"your-org/gpu-gate/.github/workflows/gate.yml@{SHA}", "./.github/workflows/gate.yml")
    text = text.replace(f"your-org/gpu-gate@{SHA}", "./.gpu-gate-action")
    doc = json.loads(text)
    for job in doc["jobs"].values():
        if job.get("uses") == "./.github/workflows/gate.yml":
            job["with"].update({"gpu-gate-repository": act.GPU_GATE_REPO, "gpu-gate-ref": act.GPU_GATE_REF,
                                "python": python, "hosted-python": python, "gpu": False,
                                # the test repository is not a Python package
                                "setup": "python -c 'import sys, torch; print(\"setup ran with\", sys.executable)'"})
        for step in job.get("steps", []):
            if step.get("uses") == "./.gpu-gate-action":
                step.setdefault("with", {}).update({"python": python, "gpu": "false"})
    return doc


@pytest.fixture
def repo(tmp_path: Path) -> tuple[Path, Path, str]:
    """A pull request that breaks a CUDA kernel (line 3), with no spec: red, for two reasons."""
    repo = tmp_path / "repo"
    (repo / "csrc").mkdir(parents=True)
    act.git(repo, "init", "-q", "-b", "main")
    (repo / "csrc" / "add.cu").write_text(act.GOOD)
    (repo / ".gpu-gate.yml").write_text("version: 1\n")  # the examples name it
    act.copy_action(repo / ".gpu-gate-action")
    wf = repo / ".github" / "workflows"
    wf.mkdir(parents=True)
    shutil.copy(ROOT / ".github" / "workflows" / "gate.yml", wf / "gate.yml")
    python = act.runner_python(tmp_path)
    for name, title in (("single.yml", "One GPU job"), ("fanout.yml", "Fan-out: the reusable workflow")):
        (wf / name).write_text(yaml.safe_dump(for_act(example(title), python), sort_keys=False))
    act.git(repo, "add", "-A")
    act.git(repo, "commit", "-q", "-m", "base")
    base = act.git(repo, "rev-parse", "HEAD")
    act.git(repo, "checkout", "-q", "-b", "feature")
    (repo / "csrc" / "add.cu").write_text(act.BROKEN)
    act.git(repo, "commit", "-q", "-am", "break add")
    head = act.git(repo, "rev-parse", "HEAD")
    event = tmp_path / "event.json"
    event.write_text(json.dumps({"number": 7, "repository": {"full_name": "octo/kernels"},
                                 "pull_request": {"number": 7, "head": {"sha": head, "ref": "feature",
                                                                        "repo": {"full_name": "octo/kernels",
                                                                                 "fork": False}},
                                                  "base": {"sha": base, "ref": "main"}}}))
    return repo, event, head


@pytest.mark.slow
def test_the_single_job_example_runs_under_act(repo, tmp_path: Path) -> None:
    path, event, head = repo
    with FakeGitHub() as gh:
        res = act.run_act(path, event, gh, "single.yml", tmp_path / "run", tmp_path / "home")
        log = res.stdout + res.stderr
        assert res.returncode != 0, "the kernel does not compile: the job must fail"
        assert "gpu-gate verdict: failed, counts: {" in log, log[-6000:]
        (run,) = gh.check_runs.values()
        assert run["head_sha"] == head and run["conclusion"] == "failure"
        assert len(gh.comments[7]) == 1 and gh.violations == []


@pytest.mark.slow
def test_the_fan_out_example_runs_under_act(repo, tmp_path: Path) -> None:
    path, event, head = repo
    with FakeGitHub() as gh:
        res = act.run_act(path, event, gh, "fanout.yml", tmp_path / "run", tmp_path / "home")
        log = res.stdout + res.stderr
        assert "setup ran with" in log, log[-6000:]
        assert act.verdict_blocked(log, report="failure"), log[-6000:]
        assert res.returncode != 0
        (run,) = gh.check_runs.values()
        assert run["head_sha"] == head and run["conclusion"] == "failure"
        assert ("csrc/add.cu", 3) in {(a["path"], a["start_line"]) for a in gh.annotations[run["id"]]}
        assert len(gh.comments[7]) == 1 and gh.violations == []
