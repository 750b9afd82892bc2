"""Fork code reaches a GPU only after a maintainer approved that exact commit.

``python -m gpu_gate.github.approval`` runs in a job before the GPU jobs (gate.yml's
``approval: comment``). A pull request from a fork is approved when an owner, member or collaborator
of the repository has commented ``/gpu-gate approve <head sha>`` on it, naming the full SHA of the
head commit this run checks. A new push has a new head SHA, which no comment names yet: each commit
needs its own approval. A label cannot do this, because it stays on the pull request when new commits
arrive. Pull requests from branches of the repository itself, pushes and merge queues need none: their
authors can push to the repository anyway.

It writes the step output ``approved`` (``true`` or ``false``) and exits 0 either way: the job that
waits is the GPU job, and the workflow's verdict job turns "not approved" into a red required check.
Exit code 2 when it cannot tell (the comments cannot be read).
"""
from __future__ import annotations

import dataclasses
import os
import re
import sys
import urllib.parse
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from .client import GitHubClient, GitHubError
from .context import ActionsContext

COMMAND = re.compile(r"^/gpu-gate approve ([0-9a-f]{40})\s*$", re.M)
# The same approval for the rule findings a maintainer may let through (gpu_gate.rules.approved): a
# command of its own, since approving a fork's commit to run on a GPU is not accepting its specs.
RULES_COMMAND = re.compile(r"^/gpu-gate approve-rules ([0-9a-f]{40})\s*$", re.M)
MAINTAINERS = frozenset({"OWNER", "MEMBER", "COLLABORATOR"})
# GitHub's `permission` of a user on a repository (maintain reads as write, triage as read): who may
# let a rule finding through, which is changing what judges the repository's kernels.
WRITERS = frozenset({"admin", "write"})


@dataclasses.dataclass(frozen=True)
class Decision:
    approved: bool
    reason: str


def approvers(comments: Iterable[Mapping[str, Any]], head_sha: str, command: re.Pattern[str] = COMMAND) -> list[str]:
    """Logins of the maintainers whose comments approve ``head_sha`` with ``command``."""
    out = []
    for c in comments:
        body, user = c.get("body"), c.get("user")
        login = user.get("login", "?") if isinstance(user, dict) else "?"
        if c.get("author_association") in MAINTAINERS and isinstance(body, str) and head_sha in command.findall(body):
            out.append(str(login))
    return out


def rules_approvers(comments: Iterable[Mapping[str, Any]], head_sha: str, author: str,
                    permission: Callable[[str], str]) -> list[str]:
    """Logins whose ``/gpu-gate approve-rules <head_sha>`` counts: maintainers with write permission on
    the repository (``permission``: login -> GitHub's permission), never the pull request's ``author``,
    who cannot approve the rules their own change wrote whatever their permission."""
    out = []
    for login in sorted(set(approvers(comments, head_sha, RULES_COMMAND))):
        if login.lower() != author.lower() and permission(login) in WRITERS:
            out.append(login)
    return out


def permission_of(client: GitHubClient, repository: str) -> Callable[[str], str]:
    """The permission a user holds on ``repository`` (raises GitHubError when it cannot be read)."""
    def read(login: str) -> str:
        path = f"/repos/{repository}/collaborators/{urllib.parse.quote(login, safe='')}/permission"
        data = client.request("GET", path).data
        value = data.get("permission") if isinstance(data, dict) else None
        return value if isinstance(value, str) else "none"

    return read


def decide(ctx: ActionsContext, comments: Callable[[str, int], Iterable[Mapping[str, Any]]]) -> Decision:
    pr = ctx.pull_request
    if pr is None:
        return Decision(True, "not a pull request (a push or a merge queue): no approval needed")
    head_repo = ((pr.get("head") or {}).get("repo") or {}).get("full_name")
    if head_repo == ctx.repository:
        return Decision(True, f"a branch of {ctx.repository}: no approval needed")
    sha, number = ctx.head_sha, ctx.pr_number
    if not sha or number is None or not ctx.repository:
        return Decision(False, "the event names no pull request number, head commit or repository")
    by = approvers(comments(ctx.repository, number), sha)
    if by:
        return Decision(True, f"commit {sha} approved by {', '.join(sorted(set(by)))}")
    return Decision(False, f"commit {sha} of {head_repo or 'a fork'} is not approved: a maintainer reviews it, "
                           f"comments '/gpu-gate approve {sha}' on pull request #{number}, and re-runs this workflow")


def main(env: Mapping[str, str] | None = None) -> int:
    environ = os.environ if env is None else env
    ctx = ActionsContext.from_env(environ)

    def comments(repo: str, number: int) -> list[Any]:
        client = GitHubClient(ctx.api_url, ctx.token or "")
        try:
            return list(client.paginate(f"/repos/{repo}/issues/{number}/comments"))
        finally:
            client.close()

    try:
        decision = decide(ctx, comments)
    except GitHubError as exc:
        print(f"::error title=gpu-gate approval::cannot read the pull request's comments: {exc}", flush=True)
        return 2
    print(("" if decision.approved else "::error title=gpu-gate approval::") + decision.reason, flush=True)
    output = environ.get("GITHUB_OUTPUT")
    if output:
        with open(output, "a", encoding="utf-8") as f:
            f.write(f"approved={'true' if decision.approved else 'false'}\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
