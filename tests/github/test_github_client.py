"""The GitHub REST client against the local schema-checking fake: retries, rate limits, pagination."""
from __future__ import annotations

from collections.abc import Iterator

import pytest

from github_server import FakeGitHub
from gpu_gate.github.client import GitHubClient, GitHubError
from gpu_gate.github.comment import comment_body, marker, upsert_sticky

REPO = "octo/kernels"


@pytest.fixture
def gh() -> Iterator[FakeGitHub]:
    with FakeGitHub() as server:
        yield server


@pytest.fixture
def waits() -> list[float]:
    return []


@pytest.fixture
def client(gh: FakeGitHub, waits: list[float]) -> Iterator[GitHubClient]:
    c = GitHubClient(gh.url, gh.token, sleeper=waits.append, jitter=lambda: 0.25)
    yield c
    c.close()


def test_requests_carry_the_api_headers_and_pass_the_schema(gh: FakeGitHub, client: GitHubClient) -> None:
    client.request("POST", f"/repos/{REPO}/issues/7/comments", json={"body": "hello"})
    assert [c["body"] for c in gh.comments[7]] == ["hello"]
    assert gh.violations == []


def test_the_server_rejects_a_body_over_the_comment_limit(gh: FakeGitHub, client: GitHubClient) -> None:
    with pytest.raises(GitHubError) as err:
        client.request("POST", f"/repos/{REPO}/issues/7/comments", json={"body": "x" * 65537})
    assert err.value.status == 422
    assert "Body is too long" in str(err.value)
    assert len(gh.violations) == 1 and gh.comments[7] == []


def test_the_server_rejects_a_wrong_token_and_a_bad_enum(gh: FakeGitHub, waits: list[float]) -> None:
    bad = GitHubClient(gh.url, "not-the-token", sleeper=waits.append)
    with pytest.raises(GitHubError) as err:
        bad.request("GET", f"/repos/{REPO}/issues/7/comments")
    assert err.value.status == 401
    good = GitHubClient(gh.url, gh.token, sleeper=waits.append)
    with pytest.raises(GitHubError) as err:
        good.request("POST", f"/repos/{REPO}/check-runs", json={
            "name": "gpu-gate", "head_sha": "a" * 40, "status": "completed", "conclusion": "red",
            "output": {"title": "t", "summary": "s"}})
    assert err.value.status == 422
    assert any("conclusion" in p for v in gh.violations for p in v.problems)


def test_pagination_follows_link_headers_100_per_page(gh: FakeGitHub, client: GitHubClient) -> None:
    gh.seed_comments(7, 250)
    bodies = [c["body"] for c in client.paginate(f"/repos/{REPO}/issues/7/comments")]
    assert len(bodies) == 250 and bodies[-1] == "an unrelated comment 249"
    lists = gh.calls("issues/list-comments")
    assert len(lists) == 3
    assert gh.violations == []


def test_secondary_rate_limit_waits_for_retry_after(gh: FakeGitHub, client: GitHubClient, waits: list[float]) -> None:
    gh.inject("issues/create-comment", "secondary_rate_limit", wait_s=7)
    client.request("POST", f"/repos/{REPO}/issues/7/comments", json={"body": "hi"})
    assert waits == [7.0]
    assert len(gh.comments[7]) == 1


def test_primary_rate_limit_waits_until_the_reset_time(gh: FakeGitHub, client: GitHubClient,
                                                       waits: list[float]) -> None:
    gh.inject("issues/list-comments", "primary_rate_limit", wait_s=40)
    list(client.paginate(f"/repos/{REPO}/issues/7/comments"))
    assert len(waits) == 1 and 38.0 <= waits[0] <= 41.0


def test_rate_limit_without_headers_waits_at_least_a_minute(gh: FakeGitHub, client: GitHubClient,
                                                           waits: list[float]) -> None:
    gh.inject("issues/list-comments", "too_many_requests", times=2)
    list(client.paginate(f"/repos/{REPO}/issues/7/comments"))
    assert waits == [60.0, 120.0]


def test_a_rate_limit_longer_than_the_cap_gives_up_instead_of_idling(gh: FakeGitHub, client: GitHubClient,
                                                                    waits: list[float]) -> None:
    gh.inject("issues/list-comments", "primary_rate_limit", wait_s=3600)
    with pytest.raises(GitHubError, match="rate limited"):
        list(client.paginate(f"/repos/{REPO}/issues/7/comments"))
    assert waits == []


def test_server_errors_are_retried_with_exponential_backoff(gh: FakeGitHub, client: GitHubClient,
                                                            waits: list[float]) -> None:
    gh.inject("issues/list-comments", "server_error", times=3)
    gh.seed_comments(7, 2)
    assert len(list(client.paginate(f"/repos/{REPO}/issues/7/comments"))) == 2
    assert waits == [1.25, 2.25, 4.25]


def test_persistent_server_errors_end_in_one_clear_error(gh: FakeGitHub, client: GitHubClient) -> None:
    gh.inject("issues/list-comments", "server_error", times=10)
    with pytest.raises(GitHubError, match="gave up after 5 attempts; last: HTTP 500"):
        client.request("GET", f"/repos/{REPO}/issues/7/comments")


def test_a_plain_403_is_not_mistaken_for_a_rate_limit(gh: FakeGitHub, client: GitHubClient,
                                                      waits: list[float]) -> None:
    gh.read_only = True
    with pytest.raises(GitHubError) as err:
        client.request("POST", f"/repos/{REPO}/issues/7/comments", json={"body": "x"})
    assert err.value.read_only and waits == []


def test_the_token_never_appears_in_errors_or_repr(gh: FakeGitHub, client: GitHubClient) -> None:
    gh.inject("issues/list-comments", "server_error", times=10)
    with pytest.raises(GitHubError) as err:
        client.request("GET", f"/repos/{REPO}/issues/7/comments")
    assert gh.token not in str(err.value) and gh.token not in repr(client)


def test_sticky_comment_dropped_after_the_post_landed_is_not_posted_twice(gh: FakeGitHub,
                                                                          client: GitHubClient) -> None:
    gh.seed_comments(7, 120)
    gh.inject("issues/create-comment", "drop_after_apply")
    body = comment_body("report v1", "ci/gate", None)
    upsert_sticky(client, REPO, 7, "ci/gate", body)
    ours = [c for c in gh.comments[7] if c["body"].startswith(marker("ci/gate"))]
    assert len(ours) == 1 and ours[0]["body"] == body
    assert len(gh.calls("issues/create-comment")) == 1  # found by re-listing, never re-posted
    assert gh.violations == []


def test_sticky_comment_dropped_before_it_landed_is_posted_once(gh: FakeGitHub, client: GitHubClient) -> None:
    gh.inject("issues/create-comment", "drop_before_apply")
    upsert_sticky(client, REPO, 7, "ci/gate", comment_body("report", "ci/gate", None))
    assert len(gh.comments[7]) == 1
    assert len(gh.calls("issues/create-comment")) == 2


def test_comment_body_is_cut_to_the_limit_with_a_link_to_the_artifacts(gh: FakeGitHub,
                                                                      client: GitHubClient) -> None:
    url = "https://github.com/octo/kernels/actions/runs/9#artifacts"
    long = "\n".join(f"line {i} " + "é" * 80 for i in range(2000))
    body = comment_body(long, "ci/gate", url)
    assert len(body) <= 65536
    assert body.startswith(marker("ci/gate")) and body.rstrip().endswith(f"[the run's artifacts]({url}).*")
    upsert_sticky(client, REPO, 7, "ci/gate", body)
    assert gh.violations == [] and gh.comments[7][0]["body"] == body

