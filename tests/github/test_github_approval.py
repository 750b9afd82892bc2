"""A fork's commit reaches a GPU only when a maintainer's comment names that exact commit."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from github_server import FakeGitHub
from gpu_gate.github import approval

HEAD = "a" * 40
NEXT = "b" * 40


def env_for(tmp_path: Path, gh: FakeGitHub, head_repo: str = "stranger/kernels", sha: str = HEAD) -> dict[str, str]:
    event = tmp_path / "event.json"
    event.write_text(json.dumps({"number": 7, "pull_request": {
        "number": 7, "head": {"sha": sha, "repo": {"full_name": head_repo}},
        "base": {"sha": "c" * 40, "repo": {"full_name": "o/r"}}}}))
    return {"GITHUB_API_URL": gh.url, "GITHUB_REPOSITORY": "o/r", "GITHUB_TOKEN": gh.token,
            "GITHUB_EVENT_PATH": str(event), "GITHUB_OUTPUT": str(tmp_path / "out.txt")}


@pytest.fixture
def gh():
    with FakeGitHub() as server:
        yield server


def approved(tmp_path: Path) -> str:
    return (tmp_path / "out.txt").read_text().strip()


def test_a_fork_without_an_approval_waits(tmp_path: Path, gh: FakeGitHub, capsys: pytest.CaptureFixture[str]) -> None:
    assert approval.main(env_for(tmp_path, gh)) == 0 and approved(tmp_path) == "approved=false"
    assert f"comments '/gpu-gate approve {HEAD}'" in capsys.readouterr().out


def test_a_maintainers_comment_naming_the_head_commit_approves_it(tmp_path: Path, gh: FakeGitHub) -> None:
    gh.seed_comments(7, 120)  # past the first page of 100
    gh.add_comment(7, f"looked at the diff\n/gpu-gate approve {HEAD}\n", "maintainer", "MEMBER")
    assert approval.main(env_for(tmp_path, gh)) == 0 and approved(tmp_path) == "approved=true"


def test_a_new_push_needs_a_new_approval(tmp_path: Path, gh: FakeGitHub) -> None:
    """The attack a label gate lets through: approve one commit, then push another."""
    gh.add_comment(7, f"/gpu-gate approve {HEAD}", "maintainer", "OWNER")
    approval.main(env_for(tmp_path, gh, sha=NEXT))
    assert approved(tmp_path) == "approved=false"


def test_the_authors_own_comment_or_a_short_sha_does_not_approve(tmp_path: Path, gh: FakeGitHub) -> None:
    gh.add_comment(7, f"/gpu-gate approve {HEAD}", "stranger", "CONTRIBUTOR")
    gh.add_comment(7, f"/gpu-gate approve {HEAD}", "drive-by", "NONE")
    gh.add_comment(7, f"/gpu-gate approve {HEAD[:12]}", "maintainer", "MEMBER")
    gh.add_comment(7, f"please /gpu-gate approve {HEAD}", "maintainer", "MEMBER")  # not a command line
    approval.main(env_for(tmp_path, gh))
    assert approved(tmp_path) == "approved=false"


def test_a_branch_of_the_repository_needs_no_approval(tmp_path: Path, gh: FakeGitHub) -> None:
    assert approval.main(env_for(tmp_path, gh, head_repo="o/r")) == 0 and approved(tmp_path) == "approved=true"
    assert gh.calls("issues/list-comments") == []


def test_a_push_needs_no_approval(tmp_path: Path, gh: FakeGitHub) -> None:
    env = env_for(tmp_path, gh)
    Path(env["GITHUB_EVENT_PATH"]).write_text(json.dumps({"ref": "refs/heads/main"}))
    assert approval.main(env) == 0 and approved(tmp_path) == "approved=true"


def test_unreadable_comments_are_an_error_not_an_approval(tmp_path: Path, gh: FakeGitHub) -> None:
    env = env_for(tmp_path, gh)
    env["GITHUB_API_URL"] = "http://127.0.0.1:9"  # nothing listens there
    assert approval.main(env) == 2 and not (tmp_path / "out.txt").exists()
