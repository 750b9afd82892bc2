"""Which policy is in force. On a pull request the base decides: its `.gpu-gate.yml`, read from git at
the base branch's tip (the event's `pull_request.base.sha`, or `--base` resolved), with its `extends:`
resolved inside that revision, or the default preset when it has none. A branch that left an older
main is judged by the rules the maintainers hold now, not by those of its merge base. The merge base
stays the base of the diff: the head's policy file is validated (a malformed one is an error at
path:line:col) and compared with the merge base's, so that every change the pull request makes to the
rules is shown, and nothing the base branch changed since is taken for one.

`--policy FILE` is the override of whoever runs gpu-gate. On their own machine it is taken as given. In
GitHub Actions the work tree is the pull request's, so a FILE inside the repository is read at the base
revision like `.gpu-gate.yml`; a FILE outside it (the runner's own configuration) is taken as given.
"""
from __future__ import annotations

import dataclasses
import os
from pathlib import Path

from ..errors import PolicyError
from .loader import DEFAULT_SOURCE, POLICY_NAMES, LoadedPolicy, default_policy, find_in, load_from, load_policy
from .models import Policy
from .tree import FileTree, GitTree, PolicyTree


@dataclasses.dataclass(frozen=True)
class PolicyInForce:
    loaded: LoadedPolicy  # the policy that decides this run
    base: LoadedPolicy | None  # the rules' revision's policy (the base branch's tip; None without a base)
    head: LoadedPolicy | None  # the head's own policy, validated (None without a base)
    # the merge base's policy, what the head's is compared with, where it is another revision than the rules'
    since: LoadedPolicy | None = None
    rules: str | None = None  # the revision the policy and the specs in force are read at (the base branch's tip)

    @property
    def base_decides(self) -> bool:
        return self.base is not None and self.loaded is self.base

    @property
    def compared(self) -> LoadedPolicy | None:
        """The policy the head's changes to the rules are measured against: the merge base's."""
        return self.since or self.base


def choose(repo: Path, base: str | None, head: str | None, explicit: Path | None, *, strict: bool = False,
           in_actions: bool = False, rules: str | None = None) -> PolicyInForce:
    """The policy in force for a change from ``base`` (the merge base sha) to ``head`` (a sha; None: the
    work tree), with the rules read at ``rules`` (the base branch's tip; by default ``base``). Without a
    base there is nothing to compare: the work tree's policy (or ``explicit``)."""
    if base is None:
        return PolicyInForce(load_policy(repo, explicit, strict=strict), None, None)
    rules = rules or base
    rel = _repo_path(repo, explicit) if explicit is not None else None
    head_tree: PolicyTree = GitTree(repo, head, label="") if head else FileTree(repo)
    head_loaded = _load_named(head_tree, rel, strict=strict, who="head")
    base_loaded = _base_policy(repo, rules, rel, merge_base=base)
    since = _base_policy(repo, base, rel) if rules != base else None
    if explicit is not None and (rel is None or not in_actions):
        how = "the runner's own file, outside the repository" if in_actions else "given with --policy"
        loaded = load_policy(repo, explicit, strict=strict)
        return PolicyInForce(dataclasses.replace(loaded, note=f"{how}; the base's policy is not in force"),
                             base_loaded, head_loaded, since, rules)
    return PolicyInForce(base_loaded, base_loaded, head_loaded, since, rules)


def rules_note(rules: str | None, merge_base: str | None) -> str | None:
    """What the report says of where the rules came from, when that is not the merge base."""
    if rules is None or merge_base is None or rules == merge_base:
        return None
    return (f"rules: the policy and the specs of the base branch's tip {rules[:12]}; the merge base "
            f"{merge_base[:12]} is the base of the diff and of the differential runs")


def _repo_path(repo: Path, path: Path) -> str | None:
    """``path`` as a repository-relative name, or None when it lies outside the repository."""
    full = os.path.abspath(path)
    for root in (repo, Path(os.path.realpath(repo))):
        try:
            rel = Path(full).relative_to(os.path.abspath(root)).as_posix()
        except ValueError:
            continue
        return rel if rel != "." else None
    return None


def _load_named(tree: PolicyTree, rel: str | None, *, strict: bool, who: str) -> LoadedPolicy:
    name, warnings = (rel, ()) if rel is not None else find_in(tree)
    if name is None or not tree.exists(name):
        return LoadedPolicy(default_policy(), DEFAULT_SOURCE, (), is_default=True)
    loaded = load_from(tree, name, strict=strict)
    return dataclasses.replace(loaded, warnings=tuple(f"{who}: {w}" for w in warnings + loaded.warnings))


def _base_policy(repo: Path, base: str, rel: str | None, *, merge_base: str | None = None) -> LoadedPolicy:
    """The policy at revision ``base``; ``merge_base``: the change's, where ``base`` is the branch's tip."""
    tree = GitTree(repo, base)
    short = base[:12]
    try:
        loaded = _load_named(tree, rel, strict=False, who=f"base {short}")
    except PolicyError as err:
        # A broken policy on the base branch must not lock every pull request out (the fix is one of
        # them): the default preset judges, and the report says why.
        first = str(err).splitlines()[0]
        return LoadedPolicy(default_policy(), DEFAULT_SOURCE, (f"warning: the base's policy is invalid ({first}); "
                                                               f"the default preset is in force",),
                            note=f"the base's {rel or POLICY_NAMES[0]} at {short} is invalid")
    if loaded.is_default:
        name = rel or POLICY_NAMES[0]
        return dataclasses.replace(loaded, note=f"none at the base {short}, and the base decides", looked_for=name)
    name = rel or loaded.source.split(":", 1)[-1]
    tip = f", the base branch's tip (the merge base is {merge_base[:12]})" if merge_base and merge_base != base else ""
    return dataclasses.replace(loaded, source=f"{name} at base {short}",
                               note=f"the base decides{tip}; the head's changes to the rules are listed as findings")


_STRICTNESS = {"uncovered": ("ignore", "warn", "fail"), "not_run": ("warn", "fail"), "refusals": ("ignore", "warn", "fail"),
               "rule_changes": ("warn", "fail")}


def stricter_rules(policy: Policy, other: Policy) -> Policy:
    """``policy`` with each verdict rule at the stricter of the two (for a report that cannot see the base)."""
    update = {key: max(getattr(policy, key), getattr(other, key), key=order.index) for key, order in _STRICTNESS.items()}
    return policy.model_copy(update=update)
