"""The sticky PR comment: one per workflow/job key, found again by a hidden marker and edited.

In ``failures-only`` mode a passing run creates no comment, but edits one an earlier red run left,
so that the pull request does not keep showing a failure that is gone."""
from __future__ import annotations

from .client import ApiResponse, GitHubClient
from .text import COMMENT_LIMIT, fit_chars, truncation_note


def marker(key: str) -> str:
    return f"<!-- gpu-gate:sticky {key} -->"


def comment_body(markdown: str, key: str, artifacts_url: str | None) -> str:
    """Marker first (so a truncated body still carries it), then the report, within the limit."""
    head = marker(key) + "\n"
    return head + fit_chars(markdown, COMMENT_LIMIT - len(head), truncation_note(artifacts_url))


def find_sticky(client: GitHubClient, repo: str, number: int, key: str) -> dict[str, object] | None:
    tag = marker(key)
    for comment in client.paginate(f"/repos/{repo}/issues/{number}/comments"):
        body = comment.get("body") if isinstance(comment, dict) else None
        if isinstance(body, str) and body.startswith(tag):
            found: dict[str, object] = comment
            return found
    return None


def upsert_sticky(client: GitHubClient, repo: str, number: int, key: str, body: str, *,
                  create: bool = True) -> tuple[str | None, bool] | None:
    """Edit the comment carrying our marker, else create it (unless ``create`` is false: then None).
    Returns (html_url, created)."""
    existing = find_sticky(client, repo, number, key)
    if existing is not None:
        resp = client.request("PATCH", f"/repos/{repo}/issues/comments/{existing['id']}", json={"body": body})
        return _html_url(resp), False
    if not create:
        return None

    def recover() -> ApiResponse | None:
        # The POST may have landed before the connection dropped: look before posting again.
        found = find_sticky(client, repo, number, key)
        if found is None:
            return None
        return client.request("PATCH", f"/repos/{repo}/issues/comments/{found['id']}", json={"body": body})

    resp = client.request("POST", f"/repos/{repo}/issues/{number}/comments", json={"body": body}, recover=recover)
    return _html_url(resp), True


def _html_url(resp: ApiResponse) -> str | None:
    data = resp.data
    url = data.get("html_url") if isinstance(data, dict) else None
    return url if isinstance(url, str) else None
