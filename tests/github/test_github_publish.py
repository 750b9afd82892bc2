"""publish(): what a pull request sees after ``gpu-gate report --github``, against the fake GitHub."""
from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from github_server import FakeGitHub
from gpu_gate.findings import Finding, JobResult, Severity, Status
from gpu_gate.github.client import GitHubClient
from gpu_gate.github.comment import marker
from gpu_gate.github.publish import READ_ONLY_NOTE, publish
from gpu_gate.record import ChangedKernel, RunRecord
from gpu_gate.verdict import Rules, decide

HEAD_SHA = "1" * 40
MERGE_SHA = "2" * 40
PR_EVENT = {"action": "synchronize", "number": 7,
            "pull_request": {"number": 7, "head": {"sha": HEAD_SHA, "ref": "feature"},
                             "base": {"sha": "3" * 40, "ref": "main"}}}


@pytest.fixture
def gh() -> Iterator[FakeGitHub]:
    with FakeGitHub() as server:
        yield server


def make_env(tmp_path: Path, gh: FakeGitHub, *, event: dict | None = None, **extra: str) -> dict[str, str]:
    event_path = tmp_path / "event.json"
    event_path.write_text(json.dumps(PR_EVENT if event is None else event))
    env = {"GITHUB_API_URL": gh.url, "GITHUB_REPOSITORY": "octo/kernels", "GITHUB_EVENT_PATH": str(event_path),
           "GITHUB_SHA": MERGE_SHA, "GITHUB_STEP_SUMMARY": str(tmp_path / "summary.md"),
           "GITHUB_TOKEN": gh.token, "GITHUB_SERVER_URL": "https://github.com", "GITHUB_RUN_ID": "4242",
           "GITHUB_WORKFLOW": "gpu", "GITHUB_JOB": "gate"}
    env.update(extra)
    return env


def failing_record(n_findings: int = 3, message: str = "mismatch in case {i}") -> RunRecord:
    findings = [Finding(check="equivalence", kind="mismatch", message=message.format(i=i), spec="gate/add_gate.py::add",
                        file="csrc/add.cu", line=10 + i, repro=f"gpu-gate repro c{i:04d}")
                for i in range(n_findings)]
    job = JobResult(job_id="j1", check="equivalence", status=Status.FAILED, spec="gate/add_gate.py::add",
                    kernels=("csrc/add.cu",), findings=findings, cases=200)
    ok = JobResult(job_id="j2", check="memcheck", status=Status.PASSED, spec="gate/add_gate.py::add",
                   kernels=("csrc/add.cu",),
                   findings=[Finding(check="memcheck", kind="resources", message="32 registers",
                                     severity=Severity.NOTE, file="csrc/add.cu", line=3)])
    return RunRecord(base="3" * 40, head=HEAD_SHA, kernels=[ChangedKernel("csrc/add.cu", "cuda", "modified")],
                     results=[job, ok], planned_jobs=["j1", "j2"])


def run_publish(tmp_path: Path, gh: FakeGitHub, record: RunRecord, *, waits: list[float] | None = None,
                markdown: str = "report", **env_extra: str):
    verdict = decide(record, Rules())
    client = GitHubClient(gh.url, gh.token, sleeper=(waits if waits is not None else []).append,
                          jitter=lambda: 0.0)
    return publish(record, verdict, {"markdown": tmp_path / "report.md"}, env=make_env(tmp_path, gh, **env_extra),
                   markdown=markdown, client=client)


def our_comments(gh: FakeGitHub, key: str = "gpu/gate") -> list[dict]:
    return [c for c in gh.comments[7] if c["body"].startswith(marker(key))]


def test_sticky_comment_is_created_once_then_updated_in_place(tmp_path: Path, gh: FakeGitHub) -> None:
    gh.seed_comments(7, 130)  # ours must be found past the first page of 100
    first = run_publish(tmp_path, gh, failing_record())
    assert first.comment_url and not first.degraded
    record = failing_record()
    record.results[0].findings.pop()
    second = run_publish(tmp_path, gh, record)
    ours = our_comments(gh)
    assert len(ours) == 1, "the second run must edit the comment, not add one"
    assert second.comment_url == first.comment_url
    assert len(gh.calls("issues/create-comment")) == 1
    assert len(gh.calls("issues/update-comment", ok_only=True)) == 1
    assert "mismatch in case 2" not in ours[0]["body"] and "mismatch in case 1" in ours[0]["body"]
    assert gh.violations == []


def test_two_workflows_keep_separate_sticky_comments(tmp_path: Path, gh: FakeGitHub) -> None:
    run_publish(tmp_path, gh, failing_record())
    run_publish(tmp_path, gh, failing_record(), GITHUB_WORKFLOW="nightly")
    run_publish(tmp_path, gh, failing_record())
    assert len(our_comments(gh, "gpu/gate")) == 1 and len(our_comments(gh, "nightly/gate")) == 1
    assert len(gh.comments[7]) == 2


def test_check_run_goes_on_the_pr_head_commit_with_line_annotations(tmp_path: Path, gh: FakeGitHub) -> None:
    out = run_publish(tmp_path, gh, failing_record())
    (run,) = gh.check_runs.values()
    assert run["head_sha"] == HEAD_SHA, "GITHUB_SHA is the merge commit; the check belongs on the PR head"
    assert run["conclusion"] == "failure" and run["name"] == "gpu-gate"
    assert out.check_run_url == run["html_url"]
    notes = gh.annotations[run["id"]]
    assert [(a["path"], a["start_line"], a["annotation_level"]) for a in notes] == [
        ("csrc/add.cu", 10, "failure"), ("csrc/add.cu", 11, "failure"), ("csrc/add.cu", 12, "failure"),
        ("csrc/add.cu", 3, "notice")]
    assert notes[0]["raw_details"].endswith("gpu-gate repro c0000")


def test_61_annotations_take_two_requests(tmp_path: Path, gh: FakeGitHub) -> None:
    run_publish(tmp_path, gh, failing_record(60))
    creates, updates = gh.calls("checks/create"), gh.calls("checks/update")
    assert len(creates) == 1 and len(updates) == 1
    assert len(creates[0].body["output"]["annotations"]) == 50
    assert len(updates[0].body["output"]["annotations"]) == 11
    (run_id,) = gh.check_runs
    assert sorted(a["start_line"] for a in gh.annotations[run_id]) == [3] + list(range(10, 70))
    assert gh.violations == []


def test_annotation_batch_dropped_after_it_landed_is_not_appended_twice(tmp_path: Path, gh: FakeGitHub) -> None:
    gh.inject("checks/update", "drop_after_apply")
    out = run_publish(tmp_path, gh, failing_record(60))
    (run_id,) = gh.check_runs
    assert len(gh.annotations[run_id]) == 61 and not out.degraded
    assert len(gh.calls("checks/update")) == 1


def test_check_run_create_dropped_after_it_landed_makes_one_run(tmp_path: Path, gh: FakeGitHub) -> None:
    gh.inject("checks/create", "drop_after_apply")
    out = run_publish(tmp_path, gh, failing_record())
    assert len(gh.check_runs) == 1 and out.check_run_url and not out.degraded


def test_oversize_report_fits_every_limit(tmp_path: Path, gh: FakeGitHub) -> None:
    summary = tmp_path / "summary.md"
    summary.write_text("x" * (1024 * 1024 - 5000))  # earlier steps already used most of the budget
    out = run_publish(tmp_path, gh, failing_record(40, message="bad value {i} " + "y" * 9000),
                      markdown="z" * 300_000)
    assert gh.violations == [], gh.violations
    (comment,) = our_comments(gh)
    assert len(comment["body"]) <= 65536
    assert "actions/runs/4242#artifacts" in comment["body"]
    (run,) = gh.check_runs.values()
    assert len(run["output"]["summary"]) <= 65535
    assert summary.stat().st_size <= 1024 * 1024
    assert "wrote the job summary" in out.messages


def test_read_only_token_degrades_to_the_job_summary(tmp_path: Path, gh: FakeGitHub) -> None:
    gh.read_only = True
    out = run_publish(tmp_path, gh, failing_record())
    assert out.degraded and READ_ONLY_NOTE in out.messages
    assert out.comment_url is None and out.check_run_url is None
    assert gh.comments[7] == [] and gh.check_runs == {}
    assert len([r for r in gh.requests if r.method != "GET"]) == 1, "stop writing after the first refusal"
    assert "mismatch in case 0" in (tmp_path / "summary.md").read_text()
    assert all(gh.token not in m for m in out.messages)


def test_no_checks_permission_falls_back_to_a_commit_status(tmp_path: Path, gh: FakeGitHub) -> None:
    gh.inject("checks/create", "forbidden")
    out = run_publish(tmp_path, gh, failing_record())
    assert out.comment_url and out.check_run_url is None and out.degraded
    (status,) = gh.statuses
    assert status["sha"] == HEAD_SHA and status["state"] == "failure" and status["context"] == "gpu-gate"
    assert any("commit status" in m and "checks: write" in m for m in out.messages)
    assert gh.violations == []


def test_rate_limited_publish_waits_and_succeeds(tmp_path: Path, gh: FakeGitHub) -> None:
    waits: list[float] = []
    gh.inject("issues/create-comment", "secondary_rate_limit", wait_s=11)
    out = run_publish(tmp_path, gh, failing_record(), waits=waits)
    assert waits == [11.0] and len(our_comments(gh)) == 1 and not out.degraded


def test_push_event_gets_a_check_run_on_github_sha_and_no_comment(tmp_path: Path, gh: FakeGitHub) -> None:
    out = run_publish(tmp_path, gh, failing_record(), event={"ref": "refs/heads/main"})
    assert gh.comments == {} or all(not v for v in gh.comments.values())
    (run,) = gh.check_runs.values()
    assert run["head_sha"] == MERGE_SHA
    assert "not a pull request event: no PR comment" in out.messages


def test_passing_verdict_is_a_green_check(tmp_path: Path, gh: FakeGitHub) -> None:
    record = RunRecord(head=HEAD_SHA)
    run_publish(tmp_path, gh, record)
    (run,) = gh.check_runs.values()
    assert run["conclusion"] == "success" and "no kernel changes" in run["output"]["title"]


def test_without_a_token_only_the_summary_is_written(tmp_path: Path, gh: FakeGitHub) -> None:
    env = make_env(tmp_path, gh)
    del env["GITHUB_TOKEN"]
    record = failing_record()
    out = publish(record, decide(record, Rules()), {}, env=env, markdown="report")
    assert out.degraded and gh.requests == []
    assert (tmp_path / "summary.md").exists()


def test_no_link_to_an_artifact_the_run_does_not_upload(tmp_path: Path, gh: FakeGitHub) -> None:
    """The action with `artifact: ""` uploads no report: the comment must not link to one (the job
    summary, linked from the check run's details, still holds it)."""
    run_publish(tmp_path, gh, failing_record(), GPU_GATE_ARTIFACT="")
    (comment,) = our_comments(gh)
    assert "#artifacts" not in comment["body"] and "Full report" not in comment["body"]
    (run,) = gh.check_runs.values()
    assert "#artifacts" not in json.dumps(run["output"])
    assert gh.violations == []
