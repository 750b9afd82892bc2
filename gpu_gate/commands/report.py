"""``gpu-gate report``: merge the results of check shards, decide the verdict with the policy (the
base's), write the reports and publish them; and :func:`finish`, the end of ``check`` too."""
from __future__ import annotations

import dataclasses
import json
import os
from pathlib import Path
from typing import TYPE_CHECKING

from . import output as out
from ..errors import GateError
from ..exitcodes import ExitCode
from .planning import in_actions, policy_in_force
from .request import PolicyFile, Publishing, ReportOutput

if TYPE_CHECKING:
    from ..policy import LoadedPolicy
    from ..record import RunRecord
    from ..verdict import Rules, Verdict


@dataclasses.dataclass(frozen=True)
class ReportRequest:
    results: tuple[Path, ...]  # the results.json files the check shards wrote
    out: Path
    expect_plan: Path | None = None  # the plan: jobs without a result (a lost shard) then fail
    github: bool | None = None  # None: on in GitHub Actions with a token
    publishing: Publishing = Publishing()
    policy: PolicyFile = PolicyFile()


def run(request: ReportRequest) -> int:
    from ..plan import Plan
    from ..record import RunRecord, merge

    records = []
    for p in request.results:
        try:
            records.append(RunRecord.read(Path(p)))
        except FileNotFoundError:
            raise GateError(f"{p}: no such results file", hint="pass the results.json files the check shards wrote")
        except (ValueError, KeyError) as exc:
            raise GateError(f"{p}: not a gpu-gate results file ({exc})") from exc
    record = merge(records)
    if request.expect_plan:
        plan = Plan.read(request.expect_plan)
        record.planned_jobs = [j.id for j in plan.jobs]
        if not records:
            record.kernels, record.plan_findings = plan.kernels, list(plan.findings)
            record.base, record.head, record.policy_source = plan.base, plan.head, plan.policy_source
            record.rules = plan.rules
    loaded = _report_policy(record, request.policy)
    github = request.github
    if github is None:
        github = in_actions() and bool(os.environ.get("GITHUB_TOKEN") or os.environ.get("INPUT_TOKEN"))
    publishing = dataclasses.replace(request.publishing, github=github)
    return finish(record, loaded, ReportOutput(request.out, publishing=publishing))


def _report_policy(record: RunRecord, policy: PolicyFile) -> LoadedPolicy:
    """The base decides here too: the head's checkout must not relax the verdict's rules. Without the
    base revision at hand, each rule is the stricter of the head's policy and the default preset."""
    from .. import git
    from ..errors import GitError
    from ..policy import default_policy, load_policy
    from ..policy.base import stricter_rules

    root = Path.cwd()
    try:
        if record.base:
            return policy_in_force(git.repo_root(root), policy, record.base, record.head, record.rules).loaded
    except GitError as exc:
        out.warn(f"gpu-gate: warning: the base's policy cannot be read ({exc}); each verdict rule is the stricter "
                 f"of this checkout's policy and the default preset")
    loaded = load_policy(root, policy.path, strict=policy.strict)
    if not record.base:
        return loaded
    return dataclasses.replace(loaded, policy=stricter_rules(loaded.policy, default_policy()))


def local_rules(rules: Rules, record: RunRecord) -> Rules:
    """The policy's rules, where a local run without a GPU lists the GPU-only checks as not run
    here rather than failing on them, and a change of the rules that waits for a maintainer's
    approval as a warning (there is no pull request to approve it on); in CI both fail closed (see
    gpu_gate.checked)."""
    from ..checked import in_ci

    if in_ci() or record.environment.get("gpus"):
        return rules
    return dataclasses.replace(rules, gpu_not_run_here="warn", approvals_here="warn")


def finish(record: RunRecord, loaded: LoadedPolicy, output: ReportOutput, roots: dict[str, str] | None = None) -> int:
    """The verdict on ``record`` by the policy, said, written as reports, published: the exit code.
    ``roots``: this machine's directories that the record may name, and what each becomes in the
    reports (:mod:`gpu_gate.report.paths`; default: the working directory's, the runner's Python's, the
    temporary and home directories)."""
    from .json_output import check_json
    from ..report.console import gha_annotations, paint_headline, render_summary
    from ..report.paths import runner_roots, scrub_record
    from ..report.formats import OutputFormat, write_reports
    from ..coverage import revise
    from ..verdict import decide

    record = scrub_record(record, roots if roots is not None else runner_roots([Path.cwd()]))
    # What the specs launched in this run decides which changed kernels they covered.
    record.plan_findings = revise(record.kernels, record.plan_findings, record.results, loaded.policy.specs)
    if output.publishing.github:
        _approvals(record)
    verdict = decide(record, local_rules(loaded.policy.rules(), record))
    for note in record.notes if out.verbose() else ():
        out.detail(f"note: {note}")
    if out.quiet():
        out.verdict(paint_headline(verdict.headline, out.colour()))
    else:
        out.verdict(render_summary(record, verdict, colour=out.colour(), full=out.verbose()))
    if in_actions():
        for line in gha_annotations(record, verdict):
            out.verdict(line)  # workflow commands, not chatter: GitHub turns them into annotations
    code, written = int(verdict.exit_code), {}
    warnings: list[str] = []
    try:
        written = write_reports(record, verdict, output.out, list(OutputFormat), warnings=warnings,
                                sarif_notes=loaded.policy.reports.sarif_notes)
        for w in warnings:
            out.error(f"gpu-gate: warning: {w}")
    except GateError as exc:
        # No report means no evidence: fail closed, whatever the verdict was.
        out.error(f"gpu-gate: error: {exc}")
        code = int(ExitCode.INTERNAL_ERROR)
    if written and code != ExitCode.INTERNAL_ERROR:
        out.say("reports: " + ", ".join(str(p) for p in written.values()))
        if output.publishing.github:
            _publish(record, verdict, written, output.publishing)
    if output.json:
        out.data(json.dumps(check_json(record, verdict, written, code), indent=1))
    return code


def _approvals(record: RunRecord) -> None:
    """Where the run publishes to a pull request (a token in reach, no repository code running), the
    maintainers' approvals of the judged commit let the approvable rule findings through."""
    from ..github.client import GitHubError
    from ..rules.approved import apply_approval, approvable, read_approvers

    if not approvable(record):
        return
    try:
        by = read_approvers(os.environ, record.head)
    except GitHubError as exc:
        out.warn(f"gpu-gate: warning: the approvals of the rule changes cannot be read ({exc}): no approval of "
                 f"the rule changes is taken into account")
        return
    count = apply_approval(record, by, record.head or "")
    if count:
        out.say(f"{count} rule finding(s) approved for {str(record.head)[:12]} by {', '.join(by)} "
                f"(/gpu-gate approve-rules)")


def _publish(record: RunRecord, verdict: Verdict, written: dict[str, Path], publishing: Publishing) -> None:
    from ..github.publish import publish
    from ..report.markdown import render_markdown

    outcome = publish(record, verdict, written, env=os.environ, comment_mode=publishing.comment_mode,
                      markdown=render_markdown(record, verdict), pr=publishing.pr, sha=publishing.sha)
    for m in outcome.messages:
        out.say(m)
