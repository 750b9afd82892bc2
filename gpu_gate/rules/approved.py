"""A maintainer's approval of the head commit lets the approvable rule findings through.

Two findings block pending a maintainer's review rather than a change on the base branch: a new spec
over a kernel the base had (``rules-weakened``, see ``apply.py``) and a head's spec that changes more
than its call to the kernel when the base's no longer runs (``spec-signature-changed``, see
``judging.py``). An owner, member or collaborator approves them by commenting
``/gpu-gate approve-rules <head sha>`` on the pull request, naming the full SHA of the commit the run
judged (the same binding as ``/gpu-gate approve``, gpu_gate/github/approval.py): a new push needs a new
approval. gpu-gate reads the comments where it publishes (``report`` with a token), and each approved
finding stays in the report as a warning that names who approved it.
"""
from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from ..findings import Finding, JobResult, Severity, Status
from ..record import RunRecord
from .change import APPROVABLE

Comments = Callable[[str, int], Iterable[Mapping[str, Any]]]


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


def read_approvers(env: Mapping[str, str], sha: str | None, comments: Comments | None = None) -> list[str]:
    """The maintainers who approved ``sha`` on the pull request of this run (none outside one)."""
    from ..github import approval
    from ..github.context import ActionsContext

    ctx = ActionsContext.from_env(env)
    if ctx.pull_request is None or ctx.pr_number is None or not ctx.repository or not sha or len(sha) != 40:
        return []
    if sha != ctx.head_sha:
        return []  # the run judged another commit than the pull request's head: no comment names it
    read = comments or _client_comments(ctx)
    return sorted(set(approval.approvers(read(ctx.repository, ctx.pr_number), sha, approval.RULES_COMMAND)))


def _client_comments(ctx: Any) -> Comments:
    from ..github.client import GitHubClient

    def read(repo: str, number: int) -> list[Any]:
        client = GitHubClient(ctx.api_url, ctx.token or "")
        try:
            return list(client.paginate(f"/repos/{repo}/issues/{number}/comments"))
        finally:
            client.close()

    return read


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
