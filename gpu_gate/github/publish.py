"""Publishing a verdict to GitHub: job summary, sticky PR comment, check run (or commit status).

Called by ``gpu-gate report --github``. The pull request and commit come from GitHub (the event,
verified against the API on ``workflow_run`` or with ``--pr``/``--sha``: see :mod:`.target`), never
from the results file. Publishing never decides the verdict and never
fails the gate by itself: when GitHub refuses a write (a fork's read-only token, a
missing permission, a rate limit that lasts too long) the report still reaches the job
summary and the artifact, and the outcome says what was not published and why.
"""
from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from pathlib import Path

from ..record import RunRecord
from ..verdict import Verdict
from .checkrun import publish_check_run, publish_status
from .client import GitHubClient, GitHubError
from .comment import comment_body, marker, upsert_sticky
from .context import ActionsContext
from .publish_args import COMMENT_MODES
from .summary import append_summary
from .target import Target, resolve
from .text import COMMENT_LIMIT, SUMMARY_LIMIT

READ_ONLY_NOTE = ("read-only token (fork pull request?): wrote the job summary and the report artifact "
                  "instead of a PR comment")


@dataclasses.dataclass
class PublishOutcome:
    messages: list[str] = dataclasses.field(default_factory=list)
    comment_url: str | None = None
    check_run_url: str | None = None
    degraded: bool = False

    def note(self, message: str, *, degraded: bool = False) -> None:
        self.messages.append(message)
        self.degraded = self.degraded or degraded


class _ReadOnly(Exception):
    """The token turned out to be read-only: stop writing, degrade."""


def publish(record: RunRecord, verdict: Verdict, reports: dict[str, Path], *, env: Mapping[str, str],
            comment_mode: str = "sticky", markdown: str, client: GitHubClient | None = None,
            pr: int | None = None, sha: str | None = None) -> PublishOutcome:
    if comment_mode not in COMMENT_MODES:
        raise ValueError(f"comment mode {comment_mode!r} is not one of {', '.join(COMMENT_MODES)}")
    ctx = ActionsContext.from_env(env)
    out = PublishOutcome()
    _write_summary(ctx, record, verdict, markdown, out)
    if not ctx.token:
        out.note("no GitHub token: wrote the job summary only (pass `token:` or set GITHUB_TOKEN)", degraded=True)
        return out
    if ctx.owner_repo is None:
        out.note("GITHUB_REPOSITORY is not set: nothing published to GitHub", degraded=True)
        return out
    own_client = client is None
    client = client or GitHubClient(ctx.api_url, ctx.token)
    try:
        target = _target(client, ctx, record, pr, sha, out)
        if target is not None:
            if comment_mode != "off":
                _publish_comment(client, ctx, record, verdict, markdown, out, target, comment_mode)
            _publish_check(client, ctx, record, verdict, markdown, out, target.sha)
    except _ReadOnly:
        out.note(READ_ONLY_NOTE, degraded=True)
    finally:
        if own_client:
            client.close()
    if reports:
        out.messages.append("reports: " + ", ".join(f"{k}={v}" for k, v in sorted(reports.items())))
    return out


def _target(client: GitHubClient, ctx: ActionsContext, record: RunRecord, pr: int | None, sha: str | None,
            out: PublishOutcome) -> Target | None:
    try:
        target = resolve(ctx, client, pr=pr, sha=sha, claimed_head=record.head)
    except GitHubError as exc:
        out.note(f"cannot tell which pull request to publish to: {exc}", degraded=True)
        return None
    if target.refused:
        out.note(target.refused, degraded=True)
        return None
    if target.note:
        out.note(target.note, degraded=True)
    return target


def _render(record: RunRecord, verdict: Verdict, fallback: str, max_chars: int, url: str | None) -> str:
    try:
        from ..report.markdown import render_markdown
        return render_markdown(record, verdict, max_chars=max_chars, artifact_url=url)
    except (ImportError, TypeError):
        return fallback


def _write_summary(ctx: ActionsContext, record: RunRecord, verdict: Verdict, markdown: str,
                   out: PublishOutcome) -> None:
    if ctx.step_summary is None:
        return
    used = ctx.step_summary.stat().st_size if ctx.step_summary.exists() else 0
    # The renderer counts characters; append_summary then enforces the byte limit.
    text = _render(record, verdict, markdown, max(SUMMARY_LIMIT - used - 2, 1), ctx.artifacts_url)
    try:
        if append_summary(ctx.step_summary, text, ctx.artifacts_url):
            out.note("wrote the job summary")
        else:
            out.note("the job summary is full (1 MiB per step): report not added", degraded=True)
    except OSError as exc:
        out.note(f"could not write the job summary {ctx.step_summary}: {exc.strerror}", degraded=True)


def _publish_comment(client: GitHubClient, ctx: ActionsContext, record: RunRecord, verdict: Verdict,
                     markdown: str, out: PublishOutcome, target: Target, mode: str) -> None:
    number = target.pr
    if number is None:
        if target.note is None:
            out.note("not a pull request event: no PR comment")
        return
    key = ctx.sticky_key
    room = COMMENT_LIMIT - len(marker(key)) - 1
    body = comment_body(_render(record, verdict, markdown, room, ctx.artifacts_url), key, ctx.artifacts_url)
    # failures-only: a green run adds no comment, but turns an earlier red one green.
    create = mode != "failures-only" or not verdict.passed
    try:
        done = upsert_sticky(client, ctx.repository, number, key, body, create=create)
    except GitHubError as exc:
        if exc.read_only:
            raise _ReadOnly from exc
        out.note(f"PR comment not posted: {exc}", degraded=True)
        return
    if done is None:
        out.note("comment mode failures-only: the gate passed and no earlier comment to update: no PR comment")
        return
    url, created = done
    out.comment_url = url
    out.note(f"{'posted' if created else 'updated'} the PR comment {url or ''}".rstrip())


def _publish_check(client: GitHubClient, ctx: ActionsContext, record: RunRecord, verdict: Verdict,
                   markdown: str, out: PublishOutcome, sha: str | None) -> None:
    if not sha:
        out.note("no commit sha (GITHUB_SHA): no check run", degraded=True)
        return
    try:
        out.check_run_url = publish_check_run(client, ctx.repository, sha, record, verdict, markdown,
                                              artifacts_url=ctx.artifacts_url, details_url=ctx.run_url,
                                              name=ctx.check_name)
        out.note(f"created the check run on {sha[:12]}")
        return
    except GitHubError as exc:
        if exc.status != 403:
            out.note(f"check run not created: {exc}", degraded=True)
            return
        first = exc
    try:
        publish_status(client, ctx.repository, sha, verdict, target_url=ctx.run_url, context=ctx.check_name)
    except GitHubError as exc:
        if exc.read_only and out.comment_url is None:
            raise _ReadOnly from exc
        out.note(f"check run not permitted ({first.message}; grant `checks: write`) and commit status "
                 f"not set: {exc}", degraded=True)
        return
    out.note(f"check run not permitted ({first.message}; grant `checks: write`): set a commit status "
             f"on {sha[:12]} instead", degraded=True)
