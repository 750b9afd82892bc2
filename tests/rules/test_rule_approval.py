"""A maintainer's `/gpu-gate approve-rules <head sha>` lets the approvable rule findings through, in the
report that publishes; nothing else does (the author's own comment, an older commit's approval, the
GPU-run approval `/gpu-gate approve`). Real git repository, real check, the fake GitHub."""
from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from github_server import FakeGitHub
from test_cli import gate
from test_pairing import _legacy_repo


@pytest.fixture
def gh() -> Iterator[FakeGitHub]:
    with FakeGitHub() as server:
        yield server


def _report(r, tmp_path: Path, gh: FakeGitHub, head: str, name: str) -> tuple[int, str]:  # type: ignore[no-untyped-def]
    event = tmp_path / f"{name}.json"
    event.write_text(json.dumps({"number": 7, "pull_request": {
        "number": 7, "head": {"sha": head, "repo": {"full_name": "o/r"}},
        "base": {"sha": r.git("rev-parse", "main"), "repo": {"full_name": "o/r"}}}}))
    env = {"GITHUB_ACTIONS": "true", "GITHUB_API_URL": gh.url, "GITHUB_REPOSITORY": "o/r",
           "GITHUB_EVENT_PATH": str(event), "GITHUB_SHA": head, "GITHUB_TOKEN": gh.token,
           "GITHUB_STEP_SUMMARY": str(tmp_path / "summary.md"), "GITHUB_WORKFLOW": "gpu", "GITHUB_JOB": "gate"}
    p = gate("report", ".gpu-gate/out/results.json", "--out", f"reports-{name}", "--github", cwd=r.path, env=env)
    return p.returncode, p.stdout + p.stderr


def test_only_a_maintainers_approval_of_the_judged_commit_lets_a_new_spec_through(  # type: ignore[no-untyped-def]
        make_repo, tmp_path: Path, gh: FakeGitHub) -> None:
    r = _legacy_repo(make_repo)
    head = r.git("rev-parse", "feature")
    p = gate("check", "--base", "main", "--head", "feature", "--no-cache", cwd=r.path)
    assert p.returncode == 1, p.stdout + p.stderr
    code, text = _report(r, tmp_path, gh, head, "none")
    assert code == 1 and "/gpu-gate approve-rules" in text, text
    gh.add_comment(7, f"/gpu-gate approve-rules {head}", "author", "CONTRIBUTOR")  # the author's own
    gh.add_comment(7, f"/gpu-gate approve-rules {'0' * 40}", "maintainer", "MEMBER")  # another commit
    gh.add_comment(7, f"/gpu-gate approve {head}", "maintainer", "MEMBER")  # may run on a GPU: not its rules
    code, text = _report(r, tmp_path, gh, head, "others")
    assert code == 1, text
    gh.add_comment(7, f"read the new spec.\n/gpu-gate approve-rules {head}", "maintainer", "MEMBER")
    code, text = _report(r, tmp_path, gh, head, "approved")
    assert code == 0, text
    assert f"[approved for {head[:12]} by maintainer]" in text
    assert "spec legacy_gate is new, and judges lib/legacy.py, which the base had" in text
