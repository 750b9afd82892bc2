"""Which pull request and commit a report is published to, taken from GitHub and never from the report.

On ``pull_request`` the event names both. On ``workflow_run`` (the publishing path for fork pull
requests: the untrusted run uploads its results, a second workflow with a token publishes them),
the commit is ``workflow_run.head_sha`` and the pull request is the one in ``workflow_run.pull_requests``
whose head is that commit; GitHub leaves that list empty for a fork, so the repository's open pull
requests from the fork's branch are asked instead. ``--pr``/``--sha`` override either.

Whatever named them, a pull request is published to only when GitHub says its head is that commit
now: a report for an older push must not overwrite the comment about a newer one. The results file's
own ``head`` is never used to choose; when it disagrees with the commit, nothing is published.
"""
from __future__ import annotations

import dataclasses
from typing import Any

from .client import GitHubClient, GitHubError
from .context import ActionsContext


@dataclasses.dataclass(frozen=True)
class Target:
    sha: str | None  # the commit the check run goes on
    pr: int | None  # the pull request the comment goes on (None: no comment)
    note: str | None = None  # why there is no pull request, when that is worth saying
    refused: str | None = None  # why nothing at all may be published


def _str(value: object) -> str | None:
    return value if isinstance(value, str) and value else None


def workflow_run(ctx: ActionsContext) -> dict[str, object] | None:
    run = ctx.event.get("workflow_run")
    return run if isinstance(run, dict) else None


def resolve(ctx: ActionsContext, client: GitHubClient, *, pr: int | None = None, sha: str | None = None,
            claimed_head: str | None = None) -> Target:
    """The verified target; raises GitHubError when GitHub cannot be asked."""
    run = workflow_run(ctx)
    if run is None and pr is None and sha is None:
        return Target(ctx.head_sha, ctx.pr_number)  # a pull_request event names its own, current head
    commit = sha or (_str(run.get("head_sha")) if run else ctx.head_sha)
    if not commit:
        return Target(None, None, refused="no commit to publish to: the event names none (pass --sha)")
    if claimed_head and claimed_head.lower() != commit.lower():
        return Target(None, None, refused=f"the results say they checked {claimed_head[:12]}, but the run that "
                                          f"made them checked {commit[:12]}: not published")
    number = pr
    if number is None and run is not None:
        if run.get("event") != "pull_request":
            return Target(commit, None, note=f"the triggering run was a {run.get('event') or 'non'}-pull_request "
                                             "event: no PR comment")
        number = _from_run(ctx, client, run, commit)
        if number is None:
            return Target(commit, None, note=f"no open pull request has head {commit[:12]} (pass --pr): no PR comment")
    elif number is None:
        number = ctx.pr_number
    if number is None:
        return Target(commit, None)
    return _verified(ctx, client, number, commit)


def _from_run(ctx: ActionsContext, client: GitHubClient, run: dict[str, Any], commit: str) -> int | None:
    for p in run.get("pull_requests") or []:
        head = p.get("head") if isinstance(p, dict) else None
        if isinstance(head, dict) and head.get("sha") == commit and isinstance(p.get("number"), int):
            return int(p["number"])
    # A fork's pull request is missing from workflow_run.pull_requests: find it by the fork's branch.
    owner = ((run.get("head_repository") or {}).get("owner") or {}).get("login")
    branch = _str(run.get("head_branch"))
    if not (isinstance(owner, str) and branch):
        return None
    found = [p for p in client.paginate(f"/repos/{ctx.repository}/pulls", {"state": "open", "head": f"{owner}:{branch}"})
             if isinstance(p, dict) and (p.get("head") or {}).get("sha") == commit and isinstance(p.get("number"), int)]
    return int(found[0]["number"]) if len(found) == 1 else None


def _verified(ctx: ActionsContext, client: GitHubClient, number: int, commit: str) -> Target:
    try:
        data = client.request("GET", f"/repos/{ctx.repository}/pulls/{number}").data
    except GitHubError as exc:
        if exc.status == 404:
            return Target(commit, None, note=f"pull request #{number} does not exist in {ctx.repository}: no PR comment")
        raise
    head = (data.get("head") or {}).get("sha") if isinstance(data, dict) else None
    if head != commit:
        return Target(commit, None, note=f"pull request #{number}'s head is now {str(head)[:12]}, not the checked "
                                         f"commit {commit[:12]}: no PR comment (the newer push publishes its own)")
    return Target(commit, number)
