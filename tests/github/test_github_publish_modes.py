"""Comment modes (sticky, off, failures-only) and the workflow_run publishing path for fork pull
requests, against the fake GitHub that checks every request against the REST description."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from github_server import FakeGitHub
from gpu_gate.github.client import GitHubClient
from gpu_gate.github.publish import publish
from gpu_gate.record import RunRecord
from gpu_gate.verdict import Rules, decide
from test_github_publish import HEAD_SHA, MERGE_SHA, failing_record, make_env, our_comments

FORK_SHA = "4" * 40
NEWER_SHA = "5" * 40
DEFAULT_BRANCH_SHA = "6" * 40  # GITHUB_SHA of a workflow_run: the default branch, never the checked commit


@pytest.fixture
def gh() -> Iterator[FakeGitHub]:
    with FakeGitHub() as server:
        yield server


def passing_record(head: str = HEAD_SHA) -> RunRecord:
    return RunRecord(head=head)


def failing(head: str = HEAD_SHA) -> RunRecord:
    record = failing_record()
    record.head = head
    return record


def run(tmp_path: Path, gh: FakeGitHub, record: RunRecord, mode: str = "sticky", *, event: dict | None = None,
        pr: int | None = None, sha: str | None = None, **env: str):
    client = GitHubClient(gh.url, gh.token, sleeper=lambda s: None, jitter=lambda: 0.0)
    return publish(record, decide(record, Rules()), {}, env=make_env(tmp_path, gh, event=event, **env),
                   markdown="report", client=client, comment_mode=mode, pr=pr, sha=sha)


# --- comment modes --------------------------------------------------------------------------

def test_off_posts_no_comment_but_still_the_check_run(tmp_path: Path, gh: FakeGitHub) -> None:
    run(tmp_path, gh, failing(), "off")
    assert gh.calls("issues/list-comments") == [] and gh.calls("issues/create-comment") == []
    (check,) = gh.check_runs.values()
    assert check["conclusion"] == "failure" and gh.violations == []


def test_failures_only_comments_on_red_then_turns_the_same_comment_green(tmp_path: Path, gh: FakeGitHub) -> None:
    red = run(tmp_path, gh, failing(), "failures-only")
    (comment,) = our_comments(gh)
    assert "FAILED" in comment["body"] and red.comment_url
    green = run(tmp_path, gh, passing_record(), "failures-only")
    (comment,) = our_comments(gh)
    assert "PASSED" in comment["body"] and "FAILED" not in comment["body"], "no stale red comment"
    assert green.comment_url == red.comment_url and "updated the PR comment" in " ".join(green.messages)
    assert len(gh.calls("issues/create-comment")) == 1 and gh.violations == []


def test_failures_only_green_without_an_earlier_comment_posts_none(tmp_path: Path, gh: FakeGitHub) -> None:
    gh.seed_comments(7, 3)
    out = run(tmp_path, gh, passing_record(), "failures-only")
    assert our_comments(gh) == [] and len(gh.comments[7]) == 3
    assert gh.calls("issues/create-comment") == [] and gh.calls("issues/update-comment") == []
    assert any("failures-only" in m for m in out.messages) and not out.degraded
    (check,) = gh.check_runs.values()
    assert check["conclusion"] == "success"


def test_sticky_comments_on_a_green_run_too(tmp_path: Path, gh: FakeGitHub) -> None:
    run(tmp_path, gh, passing_record(), "sticky")
    (comment,) = our_comments(gh)
    assert "PASSED" in comment["body"]


def test_unknown_comment_mode_is_refused(tmp_path: Path, gh: FakeGitHub) -> None:
    with pytest.raises(ValueError, match="failures-only"):
        run(tmp_path, gh, failing(), "on-failure")


# --- workflow_run: the publishing half of a fork's pull request --------------------------------

def workflow_run_event(head_sha: str = FORK_SHA, *, pull_requests: list[dict[str, Any]] | None = None,
                       event: str = "pull_request", fork_owner: str = "mallory") -> dict[str, Any]:
    """What GitHub sends the publishing workflow when the gate's run completes. For a fork's pull
    request ``pull_requests`` is empty."""
    return {"action": "completed", "workflow_run": {
        "id": 99, "event": event, "head_sha": head_sha, "head_branch": "fast-rmsnorm", "conclusion": "failure",
        "pull_requests": pull_requests or [],
        "head_repository": {"full_name": f"{fork_owner}/kernels", "owner": {"login": fork_owner}},
        "html_url": "https://github.com/octo/kernels/actions/runs/99"}}


def fork_pull(gh: FakeGitHub, sha: str = FORK_SHA) -> None:
    gh.add_pull(7, sha, head_repo="mallory/kernels", head_ref="fast-rmsnorm")


def test_fork_pull_request_is_found_by_its_branch_and_verified(tmp_path: Path, gh: FakeGitHub) -> None:
    fork_pull(gh)
    gh.add_pull(8, "7" * 40, head_repo="mallory/kernels", head_ref="other-branch")
    out = run(tmp_path, gh, failing(FORK_SHA), event=workflow_run_event(), GITHUB_SHA=DEFAULT_BRANCH_SHA)
    assert len(our_comments(gh)) == 1 and out.comment_url
    (check,) = gh.check_runs.values()
    assert check["head_sha"] == FORK_SHA, "on the checked commit, not GITHUB_SHA (the default branch)"
    (listed,) = gh.calls("pulls/list")
    assert [r.path for r in gh.calls("pulls/get")] == ["/repos/octo/kernels/pulls/7"]
    assert gh.violations == []


def test_pull_request_named_by_the_run_is_verified_too(tmp_path: Path, gh: FakeGitHub) -> None:
    gh.add_pull(7, HEAD_SHA)
    event = workflow_run_event(HEAD_SHA, pull_requests=[{"number": 7, "head": {"sha": HEAD_SHA, "ref": "feature"}}])
    out = run(tmp_path, gh, failing(HEAD_SHA), event=event, GITHUB_SHA=DEFAULT_BRANCH_SHA)
    assert out.comment_url and gh.calls("pulls/list") == [] and len(gh.calls("pulls/get")) == 1


def test_a_newer_push_keeps_an_older_report_off_the_pull_request(tmp_path: Path, gh: FakeGitHub) -> None:
    fork_pull(gh, NEWER_SHA)  # the fork pushed again while this run was going
    gh.pulls[7]["head"]["sha"] = NEWER_SHA
    event = workflow_run_event(FORK_SHA, pull_requests=[{"number": 7, "head": {"sha": FORK_SHA}}])
    out = run(tmp_path, gh, failing(FORK_SHA), event=event)
    assert our_comments(gh) == [] and out.degraded
    assert any("head is now 555555555555" in m for m in out.messages)
    (check,) = gh.check_runs.values()
    assert check["head_sha"] == FORK_SHA, "the check run describes the commit that was checked"


def test_results_that_claim_another_commit_are_not_published(tmp_path: Path, gh: FakeGitHub) -> None:
    """The results file comes from the untrusted run: it cannot point the report at another commit."""
    fork_pull(gh)
    out = run(tmp_path, gh, passing_record(head=NEWER_SHA), event=workflow_run_event())
    assert gh.check_runs == {} and our_comments(gh) == [] and out.degraded
    assert [r for r in gh.requests if r.method != "GET"] == []
    assert any("the results say they checked 555555555555" in m for m in out.messages)


def test_legitimate_twin_results_for_the_checked_commit_are_published(tmp_path: Path, gh: FakeGitHub) -> None:
    fork_pull(gh)
    out = run(tmp_path, gh, passing_record(head=FORK_SHA), event=workflow_run_event())
    (check,) = gh.check_runs.values()
    assert check["conclusion"] == "success" and out.comment_url and not out.degraded


def test_no_open_pull_request_for_the_commit_means_no_comment(tmp_path: Path, gh: FakeGitHub) -> None:
    out = run(tmp_path, gh, failing(FORK_SHA), event=workflow_run_event())
    assert gh.comments == {} or not any(gh.comments.values())
    assert any("no open pull request has head 444444444444 (pass --pr)" in m for m in out.messages)
    (check,) = gh.check_runs.values()
    assert check["head_sha"] == FORK_SHA


def test_a_push_run_gets_a_check_run_and_no_comment(tmp_path: Path, gh: FakeGitHub) -> None:
    out = run(tmp_path, gh, failing(FORK_SHA), event=workflow_run_event(event="push"))
    assert gh.calls("pulls/list") == [] and gh.calls("pulls/get") == []
    (check,) = gh.check_runs.values()
    assert check["head_sha"] == FORK_SHA and any("no PR comment" in m for m in out.messages)


def test_pr_and_sha_overrides_are_verified_against_the_api(tmp_path: Path, gh: FakeGitHub) -> None:
    gh.add_pull(7, FORK_SHA)
    gh.add_pull(9, NEWER_SHA)
    wrong = run(tmp_path, gh, failing(FORK_SHA), event={"ref": "refs/heads/main"}, pr=9, sha=FORK_SHA)
    assert our_comments(gh) == [] and wrong.degraded, "#9's head is another commit"
    right = run(tmp_path, gh, failing(FORK_SHA), event={"ref": "refs/heads/main"}, pr=7, sha=FORK_SHA)
    assert right.comment_url and len(our_comments(gh)) == 1
    assert {r["head_sha"] for r in gh.check_runs.values()} == {FORK_SHA}


def test_a_pull_request_that_does_not_exist_gets_no_comment(tmp_path: Path, gh: FakeGitHub) -> None:
    out = run(tmp_path, gh, failing(FORK_SHA), event={"ref": "refs/heads/main"}, pr=404, sha=FORK_SHA)
    assert any("#404 does not exist" in m for m in out.messages)
    assert len(gh.check_runs) == 1


# --- the command line, as the publishing workflow runs it ---------------------------------------

def test_report_command_publishes_a_fork_run_with_failures_only(tmp_path: Path, gh: FakeGitHub) -> None:
    fork_pull(gh)
    results = tmp_path / "gpu-gate-results" / "results.json"
    results.parent.mkdir()
    failing(FORK_SHA).write(results)
    env = {**os.environ, **make_env(tmp_path, gh, event=workflow_run_event(), GITHUB_SHA=DEFAULT_BRANCH_SHA),
           "GITHUB_ACTIONS": "true", "GITHUB_EVENT_NAME": "workflow_run"}
    cmd = [sys.executable, "-m", "gpu_gate.cli", "report", str(results), "--out", str(tmp_path / "out"), "--github",
           "--comment-mode", "failures-only"]
    proc = subprocess.run(cmd, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 1, proc.stdout + proc.stderr  # the verdict: red
    assert "posted the PR comment" in proc.stdout, proc.stdout
    (comment,) = our_comments(gh)
    assert "actions/runs/4242#artifacts" in comment["body"], "the comment links the full report"
    (check,) = gh.check_runs.values()
    assert check["head_sha"] == FORK_SHA and gh.violations == []


def test_report_command_refuses_a_sha_that_is_not_one(tmp_path: Path) -> None:
    proc = subprocess.run([sys.executable, "-m", "gpu_gate.cli", "report", "--sha", "main"], cwd=tmp_path,
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2 and "'main' is not a full 40-hex commit SHA" in proc.stderr
