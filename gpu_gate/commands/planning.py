"""From a :class:`~gpu_gate.commands.request.PlanRequest` to a plan, for ``check``, ``plan`` and
``list-kernels``: the repository, the refs (base...head), the policy in force (the base decides),
the plan, and the base's rules applied to it. Nothing here imports torch."""
from __future__ import annotations

import dataclasses
import os
from pathlib import Path
from typing import TYPE_CHECKING

from . import output as out
from ..errors import GateError
from ..store import scans as scancache
from .request import CacheChoice, PlanRequest, PolicyFile

if TYPE_CHECKING:
    from ..plan import Plan
    from ..policy import LoadedPolicy, Policy
    from ..policy.base import PolicyInForce


@dataclasses.dataclass(frozen=True)
class Planned:
    repo: Path
    loaded: LoadedPolicy
    plan: Plan


def in_actions() -> bool:
    return os.environ.get("GITHUB_ACTIONS") == "true"


def repo_root(repo: Path | None) -> Path:
    from .. import git

    return git.repo_root(repo or Path.cwd())


def load_policy(repo: Path, policy: PolicyFile) -> LoadedPolicy:
    """The policy file given (else the repository's, else the default preset), its warnings said."""
    from ..policy import load_policy as load

    loaded = load(repo, policy.path, strict=policy.strict)
    for w in loaded.warnings:
        out.warn(w)
    return loaded


def _spec_alone(request: PlanRequest) -> PlanRequest:
    """``--spec`` with nothing to compare (no --base, no --head, no GitHub event): the specs named run
    on the work tree by absolute rules, as ``--all --spec`` runs them (what `gpu-gate init` tells a
    new user to try on the spec it wrote)."""
    from .. import git

    if (not request.only or request.every_spec or request.staged or request.base or request.head
            or git.github_event_refs(os.environ) is not None):
        return request
    out.say("no --base given: the specs --spec names run on the work tree by absolute rules, as with --all "
            "(pass --base REF to judge a change against its base)")
    return dataclasses.replace(request, every_spec=True)


def refs(repo: Path, request: PlanRequest) -> tuple[str, str | None]:
    """(base, head); head None means the work tree, as the user sees it (local use)."""
    from .. import git

    if request.staged:
        if request.base or request.head:
            raise GateError("--staged compares HEAD with the index: it takes no --base or --head")
        return git.staged_commits(repo)
    base, head = request.base, request.head
    if base is None and request.every_spec and git.github_event_refs(os.environ) is None:
        base = "HEAD"  # --all needs no change to compare: every spec runs
    if base is None or head is None:
        event = git.github_event_refs(os.environ)
        if event is not None:
            base = base or event[0]
            head = head or event[1]
    if base is None:
        raise GateError("no base to compare against", hint="pass --base REF, e.g. --base origin/main")
    if head is None and in_actions():
        head = "HEAD"  # in GitHub Actions a commit runs, never the work tree (a build step could rewrite it)
    return base, head


def policy_in_force(repo: Path, policy: PolicyFile, base: str | None, head: str | None,
                    rules: str | None = None) -> PolicyInForce:
    """The base decides (gpu_gate.policy.base): the policy at the base branch's tip (``base`` resolved,
    or ``rules`` where a plan or a results file already says which revision), with the head's validated
    and compared with the merge base's."""
    from .. import git
    from ..policy.base import choose

    merge_base = git.merge_base(repo, base, head or "HEAD") if base else None
    if base and rules is None:
        rules = git.resolve(repo, base)  # merge_base fetched it where it was missing
    choice = choose(repo, merge_base, git.resolve(repo, head or "HEAD") if base else None, policy.path,
                    strict=policy.strict, in_actions=in_actions(), rules=rules)
    for w in choice.loaded.warnings + (choice.head.warnings if choice.head else ()):
        out.warn(w)
    return choice


def make_plan(request: PlanRequest) -> Planned:
    from ..plan import build_plan
    from ..rules.apply import apply

    repo = repo_root(request.repo)
    request = _spec_alone(request)
    base, head = refs(repo, request)
    choice = policy_in_force(repo, request.policy, base, head)
    scancache.active = scan_store(choice.loaded.policy, repo, request.cache)  # until the command returns
    launches = cache_dir(choice.loaded.policy, repo, request.cache)
    plan = build_plan(repo, base, head, choice.loaded, launch_store=launches, every_spec=request.every_spec,
                      only=request.only)
    # --all (a nightly run) lists the repository's debt: every spec by absolute rules, no base's code
    apply(repo, plan, choice, differential=not request.every_spec, launch_store=launches)
    return Planned(repo, choice.loaded, plan)


def cache_dir(policy: Policy, repo: Path, cache: CacheChoice) -> Path | None:
    """The directory of the gate's stores (results, launches, scans, bytecode, compiled kernels): none
    without a cache, none where the commit carries it (files in it, or a link on its path: what is
    there was written by whoever wrote the commit, and a link points wherever it likes)."""
    from ..store.results import carried_by_commit

    directory = cache.directory(policy, repo)
    if directory is None:
        return None
    try:
        return None if carried_by_commit(repo, directory) else directory
    except GateError:
        return None  # no commit checked out: nothing to trust it against


def scan_store(policy: Policy, repo: Path, cache: CacheChoice) -> scancache.ScanStore | None:
    """What earlier runs read of the repository's modules (gpu_gate.store.scans), beside the result
    cache and under its rule."""
    directory = cache_dir(policy, repo, cache)
    return scancache.ScanStore(directory / "scan") if directory is not None else None


def say_head(plan: Plan, staged: bool) -> None:
    if staged:
        out.say(f"comparing HEAD {plan.base[:12] if plan.base else ''} with the staged changes (what `git commit` "
                f"would record)")
    elif plan.head is None:
        out.say(f"comparing {plan.base[:12] if plan.base else 'the base'}...the work tree (uncommitted and untracked "
                f"files included; pass --head REF to check a commit)")
