"""Plan time: the rule changes between base and head become findings, and spec jobs get the base's spec.

Two revisions of the base: the merge base, which the change is measured against (the diff, the rule
changes, the base's code in differential runs), and the rules' revision, the base branch's tip, whose
policy and specs judge (``PolicyInForce.rules``); they are one commit when the branch is up to date.
Every spec job whose spec exists there also names that commit as the one its truth comes from
(``protocol.jobs.TRUTH``): its reference worker loads the spec and the repository code it needs from
that tree, never from the head's."""
from __future__ import annotations

import dataclasses
import functools
from pathlib import Path
from typing import TYPE_CHECKING

from .. import cudascan, git, pyscan
from ..judge.checks import CHECKS, Differential, check_info
from ..findings import Finding
from ..protocol.jobs import Job
from ..coverage import LaunchStore
from . import pairing, plumbing, policydiff, specdiff, truth
from .change import RuleChange
from .judged import Judges
from .specrules import SpecRules, read_specs

from ..policy.base import rules_note

if TYPE_CHECKING:
    from ..plan import Plan
    from ..policy.base import PolicyInForce

from ..protocol.jobs import BASE_SPEC, DIFFERENTIAL, TRUTH  # the job options (see gpu_gate.protocol.jobs)


def apply(repo: Path, plan: Plan, choice: PolicyInForce, *, differential: bool = True,
          launch_store: Path | None = None) -> None:
    """Add the rule changes to ``plan.findings`` and point its spec jobs at the base's specs (and,
    with ``differential``, have their equivalence jobs run the base's code on the same cases).
    ``launch_store``: the cache directory whose recorded launches say what each spec judges."""
    if choice.base is None or choice.head is None or plan.base is None:
        return
    mode = choice.loaded.policy.rule_changes
    rules = choice.rules or plan.base
    plan.rules = rules
    plan.notes += [n for n in [rules_note(rules, plan.base)] if n]
    changes = _policy_changes(choice)
    compared = choice.compared or choice.base
    base_specs = read_specs(repo, plan.base, compared.policy.specs)
    head_specs = read_specs(repo, plan.head, choice.loaded.policy.specs)
    ctx = _context(repo, plan, choice)
    store = LaunchStore(launch_store) if launch_store is not None else None
    # what the change did to the specs: the merge base's against the head's, paired by what they judge
    judges = Judges.read(repo, (plan.base, compared.policy), (plan.head, choice.loaded.policy),
                         git.diff(repo, plan.base, plan.head), store)
    found = pairing.pair(base_specs, head_specs, judges.moves.renamed, judges.base, judges.head)
    pairs = found.base
    # the specs in force: the rules' revision's (the merge base's when the branch is up to date)
    in_force = _in_force(read_specs(repo, rules, choice.base.policy.specs), base_specs, head_specs, pairs) \
        if rules != plan.base else pairs
    changes += _spec_changes(base_specs, head_specs, found, judges, ctx)
    changes += _truth_changes(repo, plan, rules, in_force, ctx)
    plan.findings += [c.finding(mode) for c in changes]
    jobs = plan.jobs + _base_checks(plan, choice, in_force)
    judged = [_judged_by_base(j, head_specs, in_force, mode, rules, pairs, plan.base, ctx.index) for j in jobs]
    if differential and choice.loaded.policy.checks.equivalence.differential:
        judged = [_differential(j, pairs, plan.base) for j in judged]
        judged = _compiled_at_base(repo, judged, plan.base)
    plan.jobs = sorted(judged, key=lambda j: j.id)


def _spec_changes(base: dict[str, SpecRules], head: dict[str, SpecRules], found: pairing.Pairing, judges: Judges,
                  ctx: specdiff.Context) -> list[RuleChange]:
    """Each head spec against the base's it is paired with (or as new); each base spec left, retired."""
    out: list[RuleChange] = []
    still = frozenset(f for old in found.base.values() for f in judges.base.get(old.id, ()))
    for head_id, spec in sorted(head.items()):
        old = found.base.get(head_id)
        if old is None:
            out += [_new(spec, judges, still), *specdiff.reference_calls_code_under_review(spec, ctx, None)]
            continue
        if head_id in found.how:
            out.append(RuleChange("changed", f"spec {spec.name} ({spec.file}) is the base's {old.name} ({old.file}): "
                                             f"{found.how[head_id]}; the base's spec judges it", spec.file, spec.line,
                                  spec.id))
        out += specdiff.compare(old, spec, ctx)
    matched = {s.id for s in found.base.values()}
    return out + [_deleted(s, judges) for s in base.values() if s.id not in matched]


def _truth_changes(repo: Path, plan: Plan, rules: str, in_force: dict[str, SpecRules],
                   ctx: specdiff.Context) -> list[RuleChange]:
    """What the change does to the code the truth is computed with (see :mod:`.truth`), for the specs
    that run: a helper of the reference it modifies, an installed package it shadows."""
    running = {j.spec.id for j in plan.jobs if j.spec is not None}
    wanted = [spec for sid, spec in sorted(in_force.items()) if sid in running]
    if not wanted:
        return []
    tree = truth.TruthTree(repo, rules)
    roots = next((j.python_path for j in plan.jobs if j.spec is not None), ("",))
    out: list[RuleChange] = []
    for spec in wanted:
        out += truth.helpers_changed(spec, tree, ctx.changed)
        out += truth.shadowed_packages(spec, tree, ctx.files, roots)
    return out


def _new(spec: SpecRules, judges: Judges, still: frozenset[str]) -> RuleChange:
    """A spec no spec of the base pairs with. Over kernels this change adds, its truth judges only new
    code: review it. Over a kernel the base had that no spec of the base still judges, a truth written
    by this change would judge a kernel of the base: a weakening, until a maintainer approves it."""
    had = {f: judges.moves.at_base(f) for f in sorted(judges.head.get(spec.id, ()))}
    orphans = {f: olds for f, olds in had.items() if olds and f not in still}
    if not orphans:
        return RuleChange("new", f"new reference, written by this change: review it (spec {spec.name})",
                          spec.file, spec.line_of("reference"), spec.id)
    listed = "; ".join(f + ("" if olds == {f} else f" (as {', '.join(sorted(olds))})") for f, olds in orphans.items())
    return RuleChange("weakened", f"spec {spec.name} is new, and judges {listed}, which the base had: no spec of the "
                                  f"base still judges it, so a reference written by this change would judge a kernel "
                                  f"the base had", spec.file, spec.line_of("reference"), spec.id, approvable=True)


def _in_force(tip: dict[str, SpecRules], merge_base: dict[str, SpecRules], head: dict[str, SpecRules],
              since: dict[str, SpecRules]) -> dict[str, SpecRules]:
    """Head spec id -> the spec of the rules' revision (the base branch's tip) that judges it. ``since``:
    the merge base's spec each head spec is paired with (by what they judge); the tip's version of it is
    the same spec, or the one of the same name where unique (the base branch moved it). A head spec the
    merge base lacks takes a spec the base branch added since, by id or unique name. A merge base spec
    the tip retired has none: the merge base's judges (see ``_judged_by_base``)."""
    tip_of = pairing.pair(tip, merge_base, {}, {}, {}).base  # merge base spec id -> the tip's
    out = {hid: tip_of[old.id] for hid, old in since.items() if old.id in tip_of}
    taken = {s.id for s in tip_of.values()}
    added = pairing.pair({sid: s for sid, s in tip.items() if sid not in taken},
                         {hid: s for hid, s in head.items() if hid not in since}, {}, {}, {}).base
    return {**out, **added}


def _base_checks(plan: Plan, choice: PolicyInForce, pairs: dict[str, SpecRules]) -> list[Job]:
    """The jobs the base's spec asks for that the head's `checks=` dropped: the base decides them too."""
    from ..protocol.jobs import SpecRef
    from ..plan import _cost, _options, job_seed

    policy = choice.loaded.policy
    have = {j.id for j in plan.jobs}
    covered: dict[str, list[str]] = {}
    for k in plan.kernels:
        for sid in k.specs:
            covered.setdefault(sid, []).append(k.path)
    added = []
    for sid, kernels in sorted(covered.items()):
        old = pairs.get(sid)
        base_checks = old.literal("checks") if old is not None else None
        if old is None or not (base_checks is None or isinstance(base_checks, list)):
            continue
        for name, chk in policy.enabled_checks():
            job_id = f"{name}:{sid}"
            if CHECKS[name].scope != "spec" or job_id in have or (base_checks is not None and name not in base_checks):
                continue
            opts = _options(policy, name, chk)
            file, _, spec_name = sid.partition("::")
            like = next((j for j in plan.jobs if j.spec is not None and j.spec.id == sid), None)
            added.append(Job(id=job_id, check=name, level=chk.level, kernels=tuple(sorted(kernels)),
                             spec=SpecRef(file, spec_name), options=opts, cost=_cost(name, opts),
                             seed=like.seed if like else job_seed(plan.head, policy),
                             python_path=like.python_path if like else ("",),
                             why=(*tuple(plan.selected.get(sid, ())), "the base's spec runs this check")))
    return added


def _policy_changes(choice: PolicyInForce) -> list[RuleChange]:
    """The head's policy against the merge base's: what this change does to the rules (what the base
    branch did since is not the change's)."""
    compared = choice.compared
    assert compared is not None and choice.head is not None
    head = choice.head
    file = None if head.is_default else head.source
    changes = policydiff.compare(compared.policy, head.policy, file)
    if head.is_default and not compared.is_default:
        changes = [dataclasses.replace(c, what=f"{c.what} (the head has no policy file: the default preset)")
                   for c in changes]
    return changes


def _context(repo: Path, plan: Plan, choice: PolicyInForce) -> specdiff.Context:
    snap = git.Snapshot(repo, plan.head)
    # the work tree too (head None): what a local run is about to commit is this change's
    changed = {c.path for c in git.diff(repo, plan.base, plan.head)} if plan.base else set()
    kernel_paths = {k.path for k in plan.kernels}

    @functools.lru_cache(maxsize=None)
    def is_kernel_module(path: str) -> bool:
        if path in kernel_paths or cudascan.is_c_source(path):
            return True
        source = snap.read(path)
        try:
            return bool(source and pyscan.find_triton_kernels(source, path))
        except pyscan.ParseError:
            return False

    factor = choice.loaded.policy.checks.equivalence.tolerance.baseline_factor
    return specdiff.Context(snap.files, changed, is_kernel_module, factor)


def _deleted(spec: SpecRules, judges: Judges) -> RuleChange:
    """A base spec no spec of the head pairs with: retired, which only a spec whose kernels are gone may be."""
    remaining = sorted(judges.base.get(spec.id, ()))
    if remaining:
        return RuleChange("weakened", f"spec {spec.name} deleted while the kernels it checks remain "
                                      f"({', '.join(remaining[:5])})", spec.file, spec.line, spec.id)
    return RuleChange("changed", f"spec {spec.name} deleted together with its kernels", spec.file, spec.line, spec.id)


def _judged_by_base(job: Job, head: dict[str, SpecRules], pairs: dict[str, SpecRules], mode: str,
                    base: str | None = None, since: dict[str, SpecRules] | None = None,
                    merge_base: str | None = None, index: pyscan.ModuleIndex | None = None) -> Job:
    """A job whose spec exists at ``base`` (the rules' revision) takes its truth from there, and its
    spec too where the head's file differs. ``since``: the specs of ``merge_base``, by head spec id:
    whether this change rewrote the reference is measured against them (not what the base branch did
    since), and a spec the base branch retired since the change left it is still the merge base's."""
    since = since or {}
    if job.spec is None or (job.spec.id not in pairs and job.spec.id not in since):
        return job
    if job.spec.id not in pairs:
        pairs, base = since, merge_base
    old, new = pairs[job.spec.id], head[job.spec.id]
    before = since.get(job.spec.id, old)
    truth_from = {TRUTH: base} if base else {}
    if old.source == new.source and old.file == new.file and old.name == new.name:
        # the head's file is the base's: nothing to swap, but the code it imports is the head's
        return dataclasses.replace(job, options={**job.options, **truth_from})
    # "plumbing": what the head's spec changes beyond its call to the kernel, against the spec that
    # judges, for the job to know whether that spec may judge with the head's call when its own no
    # longer fits (judging.py)
    carried: dict[str, object] = {"file": old.file, "name": old.name, "source": old.source,
                               "reference_changed": before.reference_shape() != new.reference_shape(),
                               "rule_changes": mode, "commit": base,
                               "plumbing": plumbing.differences(old, new, index)}
    return dataclasses.replace(job, options={**job.options, BASE_SPEC: carried, **truth_from})


def _differential(job: Job, pairs: dict[str, SpecRules], base: str) -> Job:
    """An equivalence, determinism or compute-sanitizer job whose spec exists at the base runs the
    base's code on the same cases too (see ``checks/equivalence.py``, ``checks/determinism.py``,
    ``checks/sanitizer.py``): its failures are then new, pre-existing or fixed."""
    if _differential_by(job) != "cases" or job.spec is None or job.spec.id not in pairs or job.case:
        return job
    return dataclasses.replace(job, options={**job.options, DIFFERENTIAL: base})


def _compiled_at_base(repo: Path, jobs: list[Job], base: str) -> list[Job]:
    """A compile job whose kernel files all exist at the base builds the base's too (see
    ``checks/compiled_base.py``): what it reads from the compiled code is then new, pre-existing or
    fixed. A new file has no base: the absolute rules apply."""
    wanted = {k for j in jobs if _differential_by(j) == "build" for k in j.kernels}
    if not wanted:
        return jobs
    at_base = git.Snapshot(repo, base).object_ids(sorted(wanted))
    return [dataclasses.replace(j, options={**j.options, DIFFERENTIAL: base})
            if _differential_by(j) == "build" and j.kernels and all(k in at_base for k in j.kernels) else j
            for j in jobs]


def _differential_by(job: Job) -> Differential | None:
    """What the job compares with the base's (the registry's ``differential``)."""
    info = check_info(job.check)
    return info.differential if info is not None else None


def rule_findings(findings: list[Finding]) -> list[Finding]:
    return [f for f in findings if f.check == "rules"]
