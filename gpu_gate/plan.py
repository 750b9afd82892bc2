"""From a change set to a plan: jobs (spec x check), JSON-serialisable, deterministic
and shardable. Runs without torch or a GPU: specs are read statically here."""
from __future__ import annotations

import dataclasses
import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from . import changes, coverage, discovery, gateaware, git, pythonpath, read_files, spec_filter
from .judge.checks import CHECKS
from .findings import Finding, Severity
from .protocol.jobs import Job, SpecRef
from .policy import LoadedPolicy, Policy
from .errors import GitError
from .record import ChangedKernel, read_changed_lines

PLAN_VERSION = 1


@dataclasses.dataclass
class Plan:
    base: str | None
    head: str | None
    policy_source: str
    kernels: list[ChangedKernel]
    findings: list[Finding]  # plan-level: uncovered kernels, files that do not parse
    jobs: list[Job]
    notes: list[str] = dataclasses.field(default_factory=list)
    selected: dict[str, list[str]] = dataclasses.field(default_factory=dict)  # spec id -> why it runs
    launch_keys: dict[str, str] = dataclasses.field(default_factory=dict)  # spec id -> key of its recorded launches
    # spec id -> {file: [[first, last], ...]}: the lines the change wrote in the files the spec runs
    changed_lines: dict[str, dict[str, list[list[int]]]] = dataclasses.field(default_factory=dict)
    # the revision whose policy and specs are in force: the base branch's tip (None: the merge base)
    rules: str | None = None

    def to_json(self, shards: int | None = None) -> dict[str, object]:
        d: dict[str, object] = {
            "version": PLAN_VERSION,
            "base": self.base,
            "head": self.head,
            "rules": self.rules,
            "policy_source": self.policy_source,
            "kernels": [k.to_json() for k in self.kernels],
            "findings": [f.to_json() for f in self.findings],
            "jobs": [j.to_json() for j in self.jobs],
            "notes": self.notes,
            "selected": self.selected,
            "launch_keys": self.launch_keys,
            "changed_lines": self.changed_lines,
        }
        if shards:
            d["matrix"] = {"include": [{"shard": f"{i}/{shards}"} for i in range(1, shards + 1)
                                       if shard(self.jobs, i, shards)]}
        return d

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> Plan:
        if d.get("version") != PLAN_VERSION:
            raise ValueError(f"unsupported plan version {d.get('version')!r}")
        return cls(base=d.get("base"), head=d.get("head"), rules=d.get("rules") if isinstance(d.get("rules"), str)
                   else None, policy_source=d.get("policy_source", ""),
                   kernels=[ChangedKernel.from_json(k) for k in d.get("kernels", [])],
                   findings=[Finding.from_json(f) for f in d.get("findings", [])],
                   jobs=[Job.from_json(j) for j in d.get("jobs", [])], notes=list(d.get("notes", [])),
                   selected={str(k): list(v) for k, v in (d.get("selected") or {}).items()},
                   launch_keys={str(k): str(v) for k, v in (d.get("launch_keys") or {}).items()},
                   changed_lines=read_changed_lines(d.get("changed_lines")))

    @classmethod
    def read(cls, path: Path) -> Plan:
        return cls.from_json(json.loads(path.read_text()))


def job_seed(head: str | None, policy: Policy) -> int:
    """A fresh seed per commit (new random inputs on every push), reproducible for that commit."""
    fixed = policy.checks.equivalence.seed
    if fixed is not None:
        return int(fixed)
    return int((head or "0")[:8], 16) if head else 0


def _cost(check: str, options: dict[str, object]) -> float:
    return CHECKS[check].cost_for(options)


def _spec_jobs(policy: Policy, specs: list[discovery.SpecInfo], cov: dict[str, list[str]],
               why: dict[str, list[str]], seed: int, python_path: tuple[str, ...],
               unchanged: dict[str, set[str]] | None = None) -> list[Job]:
    """``unchanged``: for a spec that no changed kernel selects (``--all``), the kernel files it
    covers, which the compute-sanitizer checks filter on."""
    covering: dict[str, set[str]] = {}
    for kernel, ids in cov.items():
        for sid in ids:
            covering.setdefault(sid, set()).add(kernel)
    for sid, files in (unchanged or {}).items():
        if not covering.get(sid):
            covering[sid] = set(files)
    jobs = []
    by_id = {s.id: s for s in specs}
    for name, chk in policy.enabled_checks():
        if CHECKS[name].scope != "spec":
            continue
        opts = _options(policy, name, chk)
        for sid in sorted(why):
            info = by_id[sid]
            if info.checks is not None and name not in info.checks:
                continue
            jobs.append(Job(id=f"{name}:{sid}", check=name, level=chk.level, kernels=tuple(sorted(covering.get(sid, ()))),
                            spec=SpecRef(info.file, info.name), options=opts, cost=_cost(name, opts), seed=seed,
                            python_path=python_path, why=tuple(why[sid])))
    return jobs


def _options(policy: Policy, name: str, chk: Any) -> dict[str, object]:
    opts = dict(chk.options())
    info = CHECKS[name]
    if info.runs_candidate:  # how the candidate's autotuned kernels pick configs
        opts["autotune"] = policy.autotune
    if info.compiler.launched and policy.checks.compile.level != "off":
        # on a GPU, it compiles the Triton specializations its cases launch (compile_launched)
        opts["compile"] = {**policy.checks.compile.options(), "level": policy.checks.compile.level}
    if info.compiler.cuda_flags:
        opts["include_dirs"] = list(policy.cuda.include_dirs)
        opts["nvcc_flags"] = list(policy.cuda.nvcc_flags)
        if policy.cuda.nvcc:
            opts["nvcc"] = policy.cuda.nvcc
    return opts


def _kernel_jobs(policy: Policy, kernels: list[ChangedKernel], seed: int, python_path: tuple[str, ...]) -> list[Job]:
    jobs = []
    for name, chk in policy.enabled_checks():
        if CHECKS[name].scope != "kernel":
            continue
        opts = _options(policy, name, chk)
        for k in kernels:
            if k.status == "deleted" or k.language not in COMPILED_LANGUAGES:
                continue
            # python_path: a Triton kernel file is imported as the specs import it (a src/ layout)
            jobs.append(Job(id=f"{name}:{k.path}", check=name, level=chk.level, kernels=(k.path,), options=opts,
                            cost=_cost(name, opts), seed=seed, python_path=python_path))
    return jobs


COMPILED_LANGUAGES = ("cuda", "triton")  # what the compile check knows how to build


def _not_compiled(policy: Policy, kernels: list[ChangedKernel]) -> list[Finding]:
    """Kernels in languages the compile check cannot build: said, never passed in silence."""
    if policy.check("compile").level == "off":
        return []
    return [Finding(check="compile", kind="not-compiled", severity=Severity.NOTE, file=k.path,
                    message=f"{k.path}: {k.language} kernels are not compiled by the compile check (it builds CUDA "
                            f"and Triton); the specs that run them are what checks them")
            for k in kernels if k.status != "deleted" and k.language not in COMPILED_LANGUAGES]


def build_plan(repo: Path, base: str, head: str | None, loaded: LoadedPolicy, *,
               launch_store: Path | None = None, every_spec: bool = False, only: Sequence[str] = ()) -> Plan:
    """The jobs for the change ``base...head`` (``head=None``: the work tree). ``launch_store``
    is the cache directory whose recorded launches refine coverage (see gpu_gate.coverage).
    ``every_spec`` (``--all``) and ``only`` (``--spec`` globs): see gpu_gate.spec_filter."""
    policy = loaded.policy
    cs = changes.detect(repo, base, head, policy)
    notes = [loaded.banner] if loaded.is_default else []
    if cs.head is None:
        notes.append("head: the work tree, uncommitted and untracked files included")
    if cs.cosmetic:
        shown = ", ".join(cs.cosmetic[:5]) + (f" and {len(cs.cosmetic) - 5} more" if len(cs.cosmetic) > 5 else "")
        notes.append(f"changed in comments and layout only, so not judged: {shown}")
    disc = discovery.discover(repo, cs.head, policy, graph=cs.import_graph)
    cov = discovery.coverage(cs, disc.specs)
    static = {k: list(v) for k, v in cov.items()}  # by the import closure, before launches refine it
    findings: list[Finding] = list(cs.parse_errors) + list(disc.findings)
    predicted: list[coverage.Prediction] = []
    store = coverage.LaunchStore(launch_store) if launch_store is not None else None
    reads: dict[str, frozenset[str]] = {}
    if store is not None and not store.is_empty():
        base_tree = git.list_tree(repo, cs.base)
        if any(k.language == "triton" for k in cs.kernels):
            cov, predicted = coverage.predict(cs, disc.specs, cov, store, base_tree)
        assert cs.import_graph is not None
        reads = read_files.recorded(disc.specs, store, cs.import_graph.snap, base_tree)
        cov = read_files.cover(cov, reads)  # a changed artefact a spec loaded is covered by it
    discovery.annotate(cs, cov, disc.specs)
    why = coverage.select(cs, disc.specs, cov)
    for sid, reasons in read_files.select(cs, disc.specs, reads).items():
        why.setdefault(sid, []).extend(r for r in reasons if r not in why.get(sid, []))
    assert cs.import_graph is not None
    gone_why, gone_findings = coverage.deleted_imports(cs, disc.specs, cs.import_graph, _base_files(repo, cs))
    for sid, reasons in gone_why.items():
        why.setdefault(sid, []).extend(r for r in reasons if r not in why.get(sid, []))
    narrowed: list[coverage.Narrowed] = []
    body_only: set[str] = set()
    if store is not None and not store.is_empty() and not every_spec:
        body_only = _kernel_bodies_only(repo, cs, {k.path for k in cs.kernels if k.language == "triton"})
        if body_only:
            why, narrowed = coverage.narrow(cs, disc.specs, why, store, git.list_tree(repo, cs.base), body_only)
            notes += [n.note() for n in narrowed]
    if every_spec:
        why = spec_filter.widen(why, disc.specs)
    if only:
        selected = len(why)
        why = spec_filter.narrow(why, [s.id for s in disc.specs], only)
        notes += [n for n in [spec_filter.narrowing_note(len(why), selected, only)] if n]
    # a kernel whose every importing spec was narrowed away is decided now: no run of theirs will revise it
    gone = {n.spec: n for n in narrowed}
    decided = {k: [gone[s] for s in static[k]] for k in body_only if static.get(k) and set(static[k]) <= set(gone)}
    for k in decided:
        cov[k] = []
    if decided:
        discovery.annotate(cs, cov, disc.specs)
    # a spec narrowed away does not run again: a prediction about it is no longer one
    predicted = [dataclasses.replace(p, specs={s: g for s, g in p.specs.items() if s not in gone})
                 for p in predicted if p.kernel not in decided]
    findings += gone_findings + [coverage.prediction_finding(p) for p in predicted if p.specs]
    findings += _not_compiled(policy, cs.kernels) + _gate_aware(repo, cs, disc.specs)
    if policy.uncovered != "ignore":
        hidden = {p.kernel for p in predicted if p.specs} | set(decided)
        findings += discovery.uncovered({k: v for k, v in cov.items() if k not in hidden}, policy.specs)
        findings += [coverage.decided_uncovered(k, ns, policy.specs) for k, ns in sorted(decided.items())]
    if cs.kernels and cs.import_graph is not None:
        findings += _empty_spec_globs(policy, list(cs.import_graph.snap.files), loaded.source)
    seed = job_seed(cs.head or git.resolve(repo, "HEAD"), policy)
    path = pythonpath.python_path(cs.import_graph.snap.read("pyproject.toml"), policy.python_path)
    unchanged = _covered_files(policy, disc.specs, why, cov, list(cs.import_graph.snap.files)) if every_spec else None
    jobs = _kernel_jobs(policy, cs.kernels, seed, path) + _spec_jobs(policy, disc.specs, cov, why, seed, path,
                                                                     unchanged)
    if only:
        jobs = spec_filter.kernel_jobs_for(jobs, set(why))
    if cs.no_kernel_changes and not why and not findings:
        notes.append("no kernel changes")
    keys = {sid: coverage.spec_key(s, cs.import_graph.snap) for s in disc.specs if (sid := s.id) in why}
    return Plan(base=cs.base, head=cs.head, policy_source=loaded.source, kernels=cs.kernels,
                findings=_unique(findings), jobs=sorted(jobs, key=lambda j: j.id), notes=notes, selected=why,
                launch_keys=keys, changed_lines=_changed_lines(repo, cs, disc.specs, why))


def _kernel_bodies_only(repo: Path, cs: changes.ChangeSet, paths: set[str]) -> set[str]:
    """The changed Triton files among ``paths`` whose change is confined to kernel bodies."""
    assert cs.import_graph is not None
    base_tree = git.list_tree(repo, cs.base)
    out = set()
    for f in cs.files:
        if f.path not in paths or f.status != "modified" or f.path not in base_tree:
            continue
        before = git.read_blobs(repo, [base_tree[f.path]])[base_tree[f.path]]
        after = cs.import_graph.snap.read(f.path)
        if after is not None and coverage.kernel_bodies_only(before, after):
            out.add(f.path)
    return out


def _gate_aware(repo: Path, cs: changes.ChangeSet, specs: list[discovery.SpecInfo]) -> list[Finding]:
    """Kernel and wrapper files of the change (changed kernels, and the changed modules a spec
    imports; not the specs, which import gpu-gate by design) that read the process's identity."""
    spec_files = {s.file for s in specs}
    imported = {p for s in specs for p in s.imports}
    kernels = {k.path for k in cs.kernels if k.status not in ("deleted", "affected")}
    files = [(f.path, None if f.status == "added" else (f.old_path or f.path)) for f in cs.files
             if f.status != "deleted" and not f.binary and f.gitlink is None and f.path not in spec_files
             and (f.path in kernels or (f.path.endswith(".py") and f.path in imported))]
    if not files:
        return []
    assert cs.import_graph is not None
    base_tree = git.list_tree(repo, cs.base)

    def at_base(path: str) -> bytes | None:
        return git.read_blobs(repo, [base_tree[path]])[base_tree[path]] if path in base_tree else None

    return gateaware.findings(files, cs.import_graph.snap.read, at_base)


def _covered_files(policy: Policy, specs: list[discovery.SpecInfo], why: dict[str, list[str]],
                   cov: dict[str, list[str]], files: list[str]) -> dict[str, set[str]]:
    """``--all``: the kernel files of the repository that each selected spec covers, for the specs
    that no changed kernel selects (their jobs would otherwise know no kernel to check)."""
    selected = {sid for ids in cov.values() for sid in ids}
    is_kernel = changes.matcher(policy.kernels.include, policy.kernels.exclude)
    kernels = [f for f in files if is_kernel(f)]
    return {s.id: {f for f in kernels if s.covers_path(f)} for s in specs if s.id in why and s.id not in selected}


def _changed_lines(repo: Path, cs: changes.ChangeSet, specs: list[discovery.SpecInfo],
                   why: dict[str, list[str]]) -> dict[str, dict[str, list[list[int]]]]:
    """For each selected spec, the lines the change wrote in the files it runs (its kernels, the
    modules it imports, the spec itself): where a reviewer is shown the spec's failures."""
    live = [f.path for f in cs.files if f.status != "deleted" and not f.binary and f.gitlink is None]
    files = {s.id: [p for p in live if s.covers_path(p) or p in s.imports] for s in specs if s.id in why}
    wanted = {p for ps in files.values() for p in ps}
    try:
        lines = git.changed_lines(repo, cs.base, cs.head, wanted) if wanted else {}
    except GitError:
        return {}  # the report places failures on the spec and the kernels instead
    return {sid: {p: [list(r) for r in lines[p]] for p in ps if lines.get(p)}
            for sid, ps in files.items() if any(lines.get(p) for p in ps)}


def _base_files(repo: Path, cs: changes.ChangeSet) -> list[str]:
    if not any(f.status in ("deleted", "renamed") and (f.old_path or f.path).endswith(".py") for f in cs.files):
        return []
    return git.list_files(repo, cs.base)


def _empty_spec_globs(policy: Policy, files: list[str], source: str) -> list[Finding]:
    """Spec globs that match nothing at all are almost always a typo in the policy."""
    if any(changes.match(f, p) for p in policy.specs for f in files):
        return []
    globs = ", ".join(repr(p) for p in policy.specs)
    return [Finding(check="coverage", kind="spec-glob-empty", severity=Severity.WARNING,
                    message=f"{source}: no file in the repository matches the spec globs {globs} "
                            f"(fix the paths under `specs:`, or add gate specs)")]


def _unique(findings: list[Finding]) -> list[Finding]:
    seen: dict[str, Finding] = {}
    for f in findings:
        seen.setdefault(json.dumps(f.to_json(), sort_keys=True), f)
    return list(seen.values())


def shard(jobs: list[Job], index: int, count: int) -> list[Job]:
    """Jobs of shard ``index`` (1-based) of ``count``: greedy longest-first balancing by cost,
    deterministic for a given plan."""
    if count < 1 or not 1 <= index <= count:
        raise ValueError(f"bad shard {index}/{count}: need 1 <= i <= n")
    loads = [0.0] * count
    mine = []
    for j in sorted(jobs, key=lambda j: (-j.cost, j.id)):
        k = min(range(count), key=lambda i: (loads[i], i))
        loads[k] += j.cost
        if k == index - 1:
            mine.append(j)
    return sorted(mine, key=lambda j: j.id)


def parse_shard(text: str) -> tuple[int, int]:
    try:
        i, n = (int(x) for x in text.split("/"))
    except ValueError:
        raise ValueError(f"bad --shard {text!r}: expected I/N, e.g. 1/4") from None
    if n < 1 or not 1 <= i <= n:
        raise ValueError(f"bad --shard {text!r}: need 1 <= I <= N")
    return i, n
