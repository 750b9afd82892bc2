"""A maintainer's approval of the head commit lets the approvable rule findings through.

Two findings block pending a maintainer's review rather than a change on the base branch: a new spec
over a kernel the base had (``rules-weakened``, see ``apply.py``) and a head's spec that changes more
than its call to the kernel when the base's no longer runs (``spec-signature-changed``, see
``judging.py``). An owner, member or collaborator approves them by commenting
``/gpu-gate approve-rules <head sha>`` on the pull request, naming the full SHA of the commit the run
judged (the same binding as ``/gpu-gate approve``, gpu_gate/github/approval.py): a new push needs a new
approval. gpu-gate reads the comments where it publishes (``report`` with a token), and each approved
finding stays in the report as a warning that names who approved it. Only an approver with write
permission on the repository counts (GitHub's collaborator permission, read with the run's token; an
organisation member may have none), and never the pull request's author: a maintainer who wrote the
change cannot approve the rules it wrote.
"""
from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Any

from ..findings import Finding, JobResult, Severity, Status
from ..record import RunRecord
from .change import APPROVABLE

Comments = Callable[[str, int], Iterable[Mapping[str, Any]]]
Source = tuple[Comments, Callable[[str], str]]  # the comments, and login -> permission on the repository


def approvable(record: RunRecord) -> bool:
    return any(_blocks(f) for f in [*record.plan_findings, *(f for r in record.results for f in r.findings)])


def apply_approval(record: RunRecord, by: list[str], sha: str) -> int:
    """Turn the record's blocking approvable findings into warnings approved by ``by``; how many."""
    if not by:
        return 0
    count = sum(_blocks(f) for f in record.plan_findings)
    record.plan_findings = [_approved(f, by, sha) for f in record.plan_findings]
    for i, r in enumerate(record.results):
        if any(_blocks(f) for f in r.findings):
            count += sum(_blocks(f) for f in r.findings)
            record.results[i] = _result(r, by, sha)
    return count


def read_approvers(env: Mapping[str, str], sha: str | None, source: Source | None = None) -> list[str]:
    """The maintainers with write permission, other than the pull request's author, who approved ``sha``
    on the pull request of this run (none outside one)."""
    from ..github import approval
    from ..github.context import ActionsContext

    ctx = ActionsContext.from_env(env)
    pr = ctx.pull_request
    if pr is None or ctx.pr_number is None or not ctx.repository or not sha or len(sha) != 40:
        return []
    if sha != ctx.head_sha:
        return []  # the run judged another commit than the pull request's head: no comment names it
    author = (pr.get("user") or {}).get("login") if isinstance(pr.get("user"), dict) else None
    if not isinstance(author, str) or not author:
        return []  # who wrote the change is unknown: nobody can be told apart from its author
    with _source(ctx, source) as (comments, permission):
        return approval.rules_approvers(comments(ctx.repository, ctx.pr_number), sha, author, permission)


@contextlib.contextmanager
def _source(ctx: Any, given: Source | None) -> Iterator[Source]:
    """The pull request's comments and the repository's permissions, read with the run's token."""
    if given is not None:
        yield given
        return
    from ..github import approval
    from ..github.client import GitHubClient

    client = GitHubClient(ctx.api_url, ctx.token or "")
    try:
        yield (lambda repo, number: list(client.paginate(f"/repos/{repo}/issues/{number}/comments")),
               approval.permission_of(client, ctx.repository))
    finally:
        client.close()


def _blocks(f: Finding) -> bool:
    return f.severity is Severity.ERROR and f.details.get(APPROVABLE) is True


def _approved(f: Finding, by: list[str], sha: str) -> Finding:
    if not _blocks(f):
        return f
    return dataclasses.replace(f, severity=Severity.WARNING, details={**f.details, "approved_by": by},
                               message=f"{f.message} [approved for {sha[:12]} by {', '.join(by)}]")


def _result(r: JobResult, by: list[str], sha: str) -> JobResult:
    findings = [_approved(f, by, sha) for f in r.findings]
    status = r.status
    if status is Status.FAILED and not any(f.severity is Severity.ERROR for f in findings):
        status = Status.PASSED  # it failed on the approved findings alone
    return dataclasses.replace(r, findings=findings, status=status)
