"""The three ways to get gpu-gate without a published release, each under ``act`` as docs/guide/install.md
writes it: (a) a mirror in the user's organisation, pinned by SHA; (b) a copy vendored into the
repository by ``gpu-gate vendor``; (c) a wheel installed by the action from a URL, pinned by SHA-256.

Each runs the same pull request (a CUDA kernel broken on line 3) on a runner whose interpreter has
torch but not gpu-gate, and must come out red for that reason, with the comment and check run posted.
"""
from __future__ import annotations

import hashlib
import http.server
import json
import os
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

import test_action_act as act
from build_helpers import build, source_tree
from github_server import FakeGitHub
from gpu_gate import __version__

pytestmark = pytest.mark.slow

CHECKOUT = f"uses: {act.CHECKOUT} # v4.2.2"
VENDORED = ".github/actions/gpu-gate"


def job(uses: str, python: str, **with_: str) -> dict:
    """The single-job workflow of docs/github.md, with the action at ``uses``."""
    return {"name": "gpu-gate", "on": "pull_request", "permissions": {},
            "jobs": {"gate": {"runs-on": ["self-hosted", "linux", "gpu"],
                              "permissions": {"contents": "read", "checks": "write", "pull-requests": "write"},
                              "steps": [
                                  {"uses": act.CHECKOUT, "with": {"fetch-depth": 0, "persist-credentials": False}},
                                  {"id": "gate", "uses": uses,
                                   "with": {"python": python, "gpu": "false", "artifact": "", **with_}},
                                  {"if": "${{ !cancelled() }}",
                                   "env": {"VERDICT": "${{ steps.gate.outputs.verdict }}"},
                                   "run": 'echo "gpu-gate verdict: $VERDICT"'}]}}}


@pytest.fixture
def pull(tmp_path: Path) -> tuple[Path, Path, str]:
    """(repo, event, head): gpu-gate vendored at the base; the head breaks csrc/add.cu on line 3."""
    repo = tmp_path / "repo"
    (repo / "csrc").mkdir(parents=True)
    act.git(repo, "init", "-q", "-b", "main")
    (repo / "csrc" / "add.cu").write_text(act.GOOD)
    (repo / ".gpu-gate.yml").write_text("version: 1\n")
    vendored = subprocess.run([sys.executable, "-m", "gpu_gate", "vendor", VENDORED], cwd=repo, capture_output=True,
                              text=True, timeout=120)
    assert vendored.returncode == 0, vendored.stderr
    (repo / ".github" / "workflows").mkdir(parents=True)
    act.git(repo, "add", "-A")
    act.git(repo, "commit", "-q", "-m", "base, with gpu-gate vendored")
    base = act.git(repo, "rev-parse", "HEAD")
    act.git(repo, "checkout", "-q", "-b", "feature")
    (repo / "csrc" / "add.cu").write_text(act.BROKEN)
    act.git(repo, "commit", "-q", "-am", "break add")
    head = act.git(repo, "rev-parse", "HEAD")
    event = tmp_path / "event.json"
    event.write_text(json.dumps({"number": 7, "repository": {"full_name": "octo/kernels"},
                                 "pull_request": {"number": 7, "head": {"sha": head, "ref": "feature"},
                                                  "base": {"sha": base, "ref": "main"}}}))
    return repo, event, head


def with_workflow(repo: Path, name: str, doc: dict) -> None:
    """The workflow, written into the work tree (act runs the work tree's workflows)."""
    (repo / ".github" / "workflows" / name).write_text(yaml.safe_dump(doc, sort_keys=False))


def red_for_the_broken_kernel(res: subprocess.CompletedProcess, gh: FakeGitHub, head: str) -> str:
    log = res.stdout + res.stderr
    assert res.returncode != 0, "the kernel does not compile: the job must fail"
    assert "gpu-gate verdict: failed" in log, log[-6000:]
    (run,) = gh.check_runs.values()
    assert run["head_sha"] == head and run["conclusion"] == "failure"
    assert ("csrc/add.cu", 3) in {(a["path"], a["start_line"]) for a in gh.annotations[run["id"]]}
    assert len(gh.comments[7]) == 1 and gh.violations == []
    return log


@pytest.fixture
def gh() -> Iterator[FakeGitHub]:
    with FakeGitHub() as server:
        yield server


# --- (a) a mirror in your organisation, pinned by SHA ---------------------------------------------

def mirror(tmp_path: Path) -> tuple[str, Path]:
    """The commands of docs/guide/install.md, (a), on real git: upstream's history mirrored into the
    organisation's repository, the release's commit read from it, and the tree a runner checks out."""
    upstream = source_tree(tmp_path / "upstream")
    act.git(upstream, "init", "-q", "-b", "main")
    act.git(upstream, "add", "-A")
    act.git(upstream, "commit", "-q", "-m", f"gpu-gate {__version__}")
    act.git(upstream, "tag", "-a", f"v{__version__}", "-m", f"gpu-gate {__version__}")
    org = tmp_path / "your-org-gpu-gate.git"
    act.git(tmp_path, "init", "-q", "--bare", str(org))
    act.git(tmp_path, "clone", "-q", "--mirror", str(upstream), str(tmp_path / "gpu-gate.git"))
    act.git(tmp_path / "gpu-gate.git", "push", "-q", "--mirror", str(org))
    refs = act.git(tmp_path, "ls-remote", str(org), f"refs/tags/v{__version__}^{{}}")
    sha = refs.split()[0]
    assert sha == act.git(upstream, "rev-parse", "HEAD") and len(sha) == 40
    tree = tmp_path / "runner-checkout"
    tree.mkdir()
    archive = subprocess.run(["git", "--git-dir", str(org), "archive", sha], capture_output=True, check=True)
    subprocess.run(["tar", "-x", "-C", str(tree)], input=archive.stdout, check=True)
    return sha, tree


def test_a_mirror_pinned_by_sha_under_act(pull, gh: FakeGitHub, tmp_path: Path) -> None:
    repo, event, head = pull
    sha, tree = mirror(tmp_path)
    python = act.runner_python(tmp_path)
    with_workflow(repo, "gate.yml", job(f"your-org/gpu-gate@{sha}", python))
    text = (repo / ".github" / "workflows" / "gate.yml").read_text()
    (repo / ".github" / "workflows" / "gate.yml").write_text(
        text.replace(f"uses: your-org/gpu-gate@{sha}", f"uses: your-org/gpu-gate@{sha} # v{__version__}"))
    res = act.run_act(repo, event, gh, "gate.yml", tmp_path / "run", tmp_path / "home",
                      extra=("--local-repository", f"your-org/gpu-gate@{sha}={tree}"))
    log = red_for_the_broken_kernel(res, gh, head)
    assert f"gpu-gate {__version__} from the action's checkout, for {python}" in log


# --- (b) a copy vendored into the repository ------------------------------------------------------

def test_a_vendored_copy_under_act(pull, gh: FakeGitHub, tmp_path: Path) -> None:
    repo, event, head = pull
    python = act.runner_python(tmp_path)
    with_workflow(repo, "gate.yml", job(f"./{VENDORED}", python))
    res = act.run_act(repo, event, gh, "gate.yml", tmp_path / "run", tmp_path / "home")
    log = red_for_the_broken_kernel(res, gh, head)
    assert f"gpu-gate {__version__} from the action's checkout, for {python}" in log
    assert "no kernel" not in log and "vendored" not in json.dumps(gh.annotations), "the copy is not a kernel"


# --- (c) a wheel from a URL, pinned by SHA-256 ----------------------------------------------------

@pytest.fixture
def served(tmp_path: Path) -> Iterator[tuple[str, str, str]]:
    """(url, sha256, file name) of a wheel of this checkout, served over HTTP as a release asset is."""
    wheel = build("wheel", source_tree(tmp_path / "src"), tmp_path / "assets")
    handler = lambda *a, **kw: http.server.SimpleHTTPRequestHandler(*a, directory=str(wheel.parent), **kw)  # noqa: E731
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield (f"http://127.0.0.1:{server.server_address[1]}/{wheel.name}",
               hashlib.sha256(wheel.read_bytes()).hexdigest(), wheel.name)
    finally:
        server.shutdown()


def test_a_wheel_pinned_by_checksum_under_act(pull, served, gh: FakeGitHub, tmp_path: Path) -> None:
    repo, event, head = pull
    url, digest, name = served
    python = act.runner_python(tmp_path)
    with_workflow(repo, "gate.yml", job(f"./{VENDORED}", python, **{"package": url, "package-sha256": digest}))
    res = act.run_act(repo, event, gh, "gate.yml", tmp_path / "run", tmp_path / "home")
    log = red_for_the_broken_kernel(res, gh, head)
    assert f"{name}: SHA-256 {digest} as pinned" in log
    assert f"gpu-gate {__version__} from {name}, for {python}" in log


def test_a_wheel_with_the_wrong_checksum_fails_closed_under_act(pull, served, gh: FakeGitHub, tmp_path: Path) -> None:
    repo, event, head = pull
    url, digest, name = served
    wrong = hashlib.sha256(b"another file").hexdigest()
    python = act.runner_python(tmp_path)
    with_workflow(repo, "gate.yml", job(f"./{VENDORED}", python, **{"package": url, "package-sha256": wrong}))
    res = act.run_act(repo, event, gh, "gate.yml", tmp_path / "run", tmp_path / "home")
    log = res.stdout + res.stderr
    assert res.returncode != 0
    assert f"{name}: its SHA-256 is {digest}, not the {wrong} that package-sha256 pins; nothing was installed" in log
    assert "gpu-gate verdict: \n" in log or "gpu-gate verdict: " + os.linesep in log or \
        "gpu-gate verdict: failed" not in log, "the gate must not have run"
    assert not gh.check_runs and not gh.comments.get(7), "nothing may be published for a run that never ran"
