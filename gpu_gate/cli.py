"""The ``gpu-gate`` command line. Domain errors are caught here, once, and printed as one line.

Nothing here imports torch: ``--help``, ``plan``, ``report`` and ``validate-policy``
run on machines without a GPU stack. ``check`` makes the plan here and hands it to
:mod:`gpu_gate.commands.check`, which runs the rest (cache, doctor, jobs, verdict, reports).
"""
from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .commands import output as out
from .store import scans as scancache
from .errors import GateError
from .exitcodes import ExitCode

if TYPE_CHECKING:
    from .plan import Plan
    from .policy import LoadedPolicy
    from .policy.base import PolicyInForce
    from .record import RunRecord

DEFAULT_OUT = ".gpu-gate/out"
DEMO_OUT = "gpu-gate-demo"


def _in_actions() -> bool:
    return os.environ.get("GITHUB_ACTIONS") == "true"


DISTRIBUTION = "gpu-kernel-gate"  # the name on the package index; the command is gpu-gate


def say(msg: str = "") -> None:
    out.say(msg)


def warn(msg: str) -> None:
    out.warn(msg)


# --- shared argument groups ------------------------------------------------------------------

def _add_selection(p: argparse.ArgumentParser) -> None:
    p.add_argument("--repo", type=Path, default=None, help="repository to check (default: the current directory)")
    p.add_argument("--base", help="base ref; the diff is base...head, three-dot (default: the GitHub event's base)")
    p.add_argument("--head", help="head ref (default: the GitHub event's head, else the work tree: uncommitted and "
                                  "untracked files included)")
    _add_policy(p)


def _add_spec_choice(p: argparse.ArgumentParser) -> None:
    p.add_argument("--spec", action="append", default=[], metavar="PATTERN",
                   help="only the specs whose id (PATH::NAME), file or name matches this glob; repeatable. A "
                        "pattern that matches no spec to run is an error")
    p.add_argument("--all", action="store_true", dest="all_specs",
                   help="every spec in the repository runs, not only those the change selects")


def _add_format(p: argparse.ArgumentParser, default: str = "text") -> None:
    p.add_argument("--format", choices=["text", "json"], default=default,
                   help=f"json: one JSON object on stdout (documented in docs/cli.md), human progress on stderr "
                        f"(default: {default})")


def _add_policy(p: argparse.ArgumentParser) -> None:
    p.add_argument("--policy", type=Path, default=None,
                   help="policy file, in force instead of the base's (default: the base revision's .gpu-gate.yml, "
                        "else the default preset; in GitHub Actions a FILE inside the repository is read at the base)")
    p.add_argument("--strict", action="store_true", help="treat unknown policy keys as errors")


def _add_launch_cache(p: argparse.ArgumentParser) -> None:
    p.add_argument("--cache-dir", help="cache directory whose recorded kernel launches refine coverage (default: the "
                                       "policy's cache.dir)")
    p.add_argument("--no-cache", action="store_true", help="ignore recorded launches: coverage by imports alone")


def _repo(args: argparse.Namespace) -> Path:
    from . import git

    return git.repo_root(args.repo or Path.cwd())


def _load_policy(repo: Path, args: argparse.Namespace) -> LoadedPolicy:
    from .policy import load_policy

    loaded = load_policy(repo, args.policy, strict=args.strict)
    for w in loaded.warnings:
        warn(w)
    return loaded


def _refs(repo: Path, args: argparse.Namespace) -> tuple[str, str | None]:
    """(base, head); head None means the work tree, as the user sees it (local use)."""
    from . import git

    if getattr(args, "staged", False):
        if args.base or args.head:
            raise GateError("--staged compares HEAD with the index: it takes no --base or --head")
        return git.staged_commits(repo)
    base, head = args.base, args.head
    if base is None and getattr(args, "all_specs", False) and git.github_event_refs(os.environ) is None:
        base = "HEAD"  # --all needs no change to compare: every spec runs
    if base is None or head is None:
        event = git.github_event_refs(os.environ)
        if event is not None:
            base = base or event[0]
            head = head or event[1]
    if base is None:
        raise GateError("no base to compare against", hint="pass --base REF, e.g. --base origin/main")
    if head is None and _in_actions():
        head = "HEAD"  # in GitHub Actions a commit runs, never the work tree (a build step could rewrite it)
    return base, head


def _policy_in_force(repo: Path, args: argparse.Namespace, base: str | None, head: str | None,
                     rules: str | None = None) -> PolicyInForce:
    """The base decides (gpu_gate.policy.base): the policy at the base branch's tip (``base`` resolved,
    or ``rules`` where a plan or a results file already says which revision), with the head's validated
    and compared with the merge base's."""
    from . import git
    from .policy.base import choose

    merge_base = git.merge_base(repo, base, head or "HEAD") if base else None
    if base and rules is None:
        rules = git.resolve(repo, base)  # merge_base fetched it where it was missing
    choice = choose(repo, merge_base, git.resolve(repo, head or "HEAD") if base else None, args.policy,
                    strict=args.strict, in_actions=_in_actions(), rules=rules)
    for w in choice.loaded.warnings + (choice.head.warnings if choice.head else ()):
        warn(w)
    return choice


def _make_plan(args: argparse.Namespace) -> tuple[Path, LoadedPolicy, Plan]:
    from .plan import build_plan
    from .rules.apply import apply

    repo = _repo(args)
    base, head = _refs(repo, args)
    choice = _policy_in_force(repo, args, base, head)
    scancache.active = _scan_store(choice.loaded.policy, repo, args)  # until main() returns
    launches = _cache_dir(choice.loaded.policy, repo, args)
    plan = build_plan(repo, base, head, choice.loaded, launch_store=launches,
                      every_spec=getattr(args, "all_specs", False), only=getattr(args, "spec", None) or ())
    # --all (a nightly run) lists the repository's debt: every spec by absolute rules, no base's code
    apply(repo, plan, choice, differential=not getattr(args, "all_specs", False), launch_store=launches)
    return repo, choice.loaded, plan


def _cache_dir(policy: Any, repo: Path, args: argparse.Namespace) -> Path | None:
    """The directory of the gate's stores (results, launches, scans, bytecode, compiled kernels): none
    without a cache, none where the commit carries it (files in it, or a link on its path: what is
    there was written by whoever wrote the commit, and a link points wherever it likes)."""
    from .store.bridge import carried_by_commit

    if getattr(args, "no_cache", False) or not policy.cache.enabled:
        return None
    given = getattr(args, "cache_dir", None)
    directory = Path(given) if given else repo / policy.cache.dir
    try:
        return None if carried_by_commit(repo, directory) else directory
    except GateError:
        return None  # no commit checked out: nothing to trust it against


def _scan_store(policy: Any, repo: Path, args: argparse.Namespace) -> Any:
    """What earlier runs read of the repository's modules (gpu_gate.store.scans), beside the result
    cache and under its rule."""
    directory = _cache_dir(policy, repo, args)
    return scancache.ScanStore(directory / "scan") if directory is not None else None


def _say_head(plan: Plan, args: argparse.Namespace) -> None:
    if getattr(args, "staged", False):
        say(f"comparing HEAD {plan.base[:12] if plan.base else ''} with the staged changes (what `git commit` "
            f"would record)")
    elif plan.head is None:
        say(f"comparing {plan.base[:12] if plan.base else 'the base'}...the work tree (uncommitted and untracked files "
            f"included; pass --head REF to check a commit)")


# --- commands --------------------------------------------------------------------------------

def cmd_plan(args: argparse.Namespace) -> int:
    from .plan import parse_shard, shard

    _, _, plan = _make_plan(args)
    if args.shard:
        i, n = parse_shard(args.shard)
        plan.jobs = shard(plan.jobs, i, n)
    text = json.dumps(plan.to_json(shards=args.shards), indent=1)
    for sid, why in sorted(plan.selected.items()):
        out.detail(f"spec {sid}: {'; '.join(why)}")
    out.detail(f"{len(plan.jobs)} jobs: " + ", ".join(j.id for j in plan.jobs))
    if args.output:
        args.output.parent.mkdir(parents=True, exist_ok=True)
        args.output.write_text(text)
        out.verdict(f"plan: {len(plan.jobs)} jobs written to {args.output}")
    else:
        out.data(text)
    return ExitCode.PASSED


def cmd_list_kernels(args: argparse.Namespace) -> int:
    from .commands.json_output import list_kernels_json

    _, loaded, plan = _make_plan(args)
    say(loaded.banner)
    _say_head(plan, args)
    if args.format == "json":
        out.data(json.dumps(list_kernels_json(plan), indent=1))
    if plan.kernels or plan.selected or plan.findings:
        _list_kernels(plan)
    out.verdict(_kernels_summary(plan))
    return ExitCode.PASSED


def _list_kernels(plan: Plan) -> None:
    from .report.console import paint

    c = out.colour()
    if not plan.kernels:
        say("no kernel file changed" + (": the specs below run for other changes" if plan.selected else ""))
    predicted = {f.file: f for f in plan.findings if f.kind == "uncovered-predicted"}
    for k in plan.kernels:
        via = f" (via {', '.join(k.via)})" if k.via else ""
        say(f"{k.path}  [{k.language}, {k.status}{via}]")
        for s in k.specs:
            say(f"    covered by {s}" + (" (names it)" if s in k.declared else ""))
        if k.path in predicted:
            say(f"    {paint('PREDICTED UNCOVERED', 'red', c)}: {predicted[k.path].message.split(': ', 1)[1]}")
        elif not k.specs and k.status != "deleted":
            say(f"    {paint('NOT COVERED', 'red', c)} by any gate spec")
        for name, line in k.functions if out.verbose() else ():
            out.detail(f"    kernel {name} at line {line}")
    if plan.selected:
        say("specs that run, and why:")
        for sid, why in sorted(plan.selected.items()):
            say(f"  {sid}: {'; '.join(why)}")
    for f in plan.findings:
        if f.kind not in ("uncovered", "uncovered-predicted"):
            say(f"{f.location or ''}: {f.message}")
    for note in plan.notes if out.verbose() else ():
        out.detail(f"note: {note}")


def _kernels_summary(plan: Plan) -> str:
    """The last line of list-kernels, shown with -q too."""
    if not plan.kernels and not plan.selected and not plan.findings:
        return "no kernel changes"
    lonely = sum(1 for k in plan.kernels if k.status != "deleted" and (not k.specs or any(
        f.kind == "uncovered-predicted" and f.file == k.path for f in plan.findings)))
    return (f"{len(plan.kernels)} changed kernel file(s), {lonely} not covered by any gate spec; "
            f"{len(plan.selected)} spec(s) run")


def worker_python(given: str | None) -> Path | None:
    """``--worker-python``, checked without running it: what a setup command left in its venv (a
    ``.pth`` file, ``sitecustomize``) would run in gpu-gate's own process. The workers run gpu-gate's
    worker code and the runner's torch with it, so it must be a venv of this very Python version."""
    if not given:
        return None
    path = Path(os.path.abspath(given))  # not resolved: a venv's python is a link to its base's
    hint = "pass the python of the venv that setup made (the setup step's worker-python output)"
    if not (path.is_file() and os.access(path, os.X_OK)):
        raise GateError(f"--worker-python {given}: no executable file there", hint=hint)
    cfg = path.parent.parent / "pyvenv.cfg"
    if not cfg.is_file():
        raise GateError(f"--worker-python {given}: not the interpreter of a virtual environment (no {cfg})", hint=hint)
    fields: dict[str, str] = {}
    for line in cfg.read_text(errors="replace").splitlines():
        key, eq, value = line.partition("=")
        if eq:
            fields[key.strip()] = value.strip()
    version = (fields.get("version") or fields.get("version_info") or "").split(".")[:2]
    mine = [str(sys.version_info[0]), str(sys.version_info[1])]
    if version != mine:
        raise GateError(f"--worker-python {given}: its venv is Python {'.'.join(version) or '(unknown)'}, gpu-gate runs "
                        f"with {'.'.join(mine)}", hint="make the venv from the interpreter gpu-gate runs with")
    return path


def cmd_check(args: argparse.Namespace) -> int:
    from .commands.check import check

    args.worker_python = worker_python(getattr(args, "worker_python", None))
    if args.plan and (args.spec or args.all_specs):
        raise GateError("--spec and --all choose what to plan; a plan file is already chosen",
                        hint="pass them to `gpu-gate plan`, or drop --plan")
    if args.plan:
        from .plan import Plan

        repo = _repo(args)
        plan = Plan.read(args.plan)
        loaded = _policy_in_force(repo, args, plan.base, plan.head, plan.rules).loaded
    else:
        repo, loaded, plan = _make_plan(args)
    say(loaded.banner)
    _say_head(plan, args)
    _require_extras(plan, args.worker_python)
    return check(repo, loaded, plan, args, cache_dir=_cache_dir(loaded.policy, repo, args))


def _require_extras(plan: Plan, worker_python: Path | None) -> None:
    """torch for the judge of any spec's job, Triton for the workers of Triton kernels: a missing one is
    one line that names the extra to install, before any job starts."""
    from .extras import require

    if any(j.spec is not None for j in plan.jobs):
        require(["torch"], "gpu-gate check")
    if any("triton" in k.language.split("+") for k in plan.kernels):
        require(["triton"], "gpu-gate check", str(worker_python) if worker_python else None)


def cmd_report(args: argparse.Namespace) -> int:
    from .plan import Plan
    from .record import RunRecord, merge

    records = []
    for p in args.results:
        try:
            records.append(RunRecord.read(Path(p)))
        except FileNotFoundError:
            raise GateError(f"{p}: no such results file", hint="pass the results.json files the check shards wrote")
        except (ValueError, KeyError) as exc:
            raise GateError(f"{p}: not a gpu-gate results file ({exc})") from exc
    record = merge(records)
    if args.expect_plan:
        plan = Plan.read(args.expect_plan)
        record.planned_jobs = [j.id for j in plan.jobs]
        if not records:
            record.kernels, record.plan_findings = plan.kernels, list(plan.findings)
            record.base, record.head, record.policy_source = plan.base, plan.head, plan.policy_source
            record.rules = plan.rules
    loaded = _report_policy(record, args)
    if args.github is None:
        args.github = _in_actions() and bool(os.environ.get("GITHUB_TOKEN") or os.environ.get("INPUT_TOKEN"))
    from .commands.check import finish

    return finish(record, loaded, Path(args.out), args)


def _report_policy(record: RunRecord, args: argparse.Namespace) -> LoadedPolicy:
    """The base decides here too: the head's checkout must not relax the verdict's rules. Without the
    base revision at hand, each rule is the stricter of the head's policy and the default preset."""
    import dataclasses as dc

    from . import git
    from .errors import GitError
    from .policy import default_policy, load_policy
    from .policy.base import stricter_rules

    root = Path.cwd()
    try:
        if record.base:
            return _policy_in_force(git.repo_root(root), args, record.base, record.head, record.rules).loaded
    except GitError as exc:
        warn(f"gpu-gate: warning: the base's policy cannot be read ({exc}); each verdict rule is the stricter of "
             f"this checkout's policy and the default preset")
    loaded = load_policy(root, args.policy, strict=args.strict)
    if not record.base:
        return loaded
    return dc.replace(loaded, policy=stricter_rules(loaded.policy, default_policy()))


def cmd_validate_policy(args: argparse.Namespace) -> int:
    from .policy import validate_policy_file
    from .report.console import paint

    if args.staged:
        code, lines = _validate_staged(args)
    else:
        code, lines = validate_policy_file(args.path or Path(".gpu-gate.yml"), strict=args.strict)
    if code != 0:
        for line in lines:
            out.error(line)
        return code
    for line in lines[:-1]:  # warnings; the last line says the file is valid
        say(line)
    out.verdict(lines[-1].replace(": valid", ": " + paint("valid", "green", out.colour()), 1))
    return code


def _validate_staged(args: argparse.Namespace) -> tuple[int, list[str]]:
    """The policy as the next commit would record it: read from the index, not the work tree."""
    from . import git
    from .policy.loader import find_in, validate_in
    from .policy.tree import GitTree

    repo = _repo(args)
    _, staged = git.staged_commits(repo)
    tree = GitTree(repo, staged, label="")
    rel = Path(os.path.relpath(os.path.abspath(args.path), repo)).as_posix() if args.path else find_in(tree)[0]
    if rel is None or rel.startswith("../") or not tree.exists(rel):
        shown = rel or ".gpu-gate.yml"
        return int(ExitCode.PASSED), [f"{shown}: not staged; nothing to validate (without a policy file the default "
                                      f"preset applies)"]
    return validate_in(tree, rel, strict=args.strict)


def cmd_repro(args: argparse.Namespace) -> int:
    from .executor.options import ExecOptions
    from .executor.slots import detect_gpus
    from .executor.job import run_one
    from .protocol.jobs import Job, SpecRef
    from .plan import job_seed
    from .report.console import progress_line

    repo = _repo(args)
    base_source, loaded, rules = None, None, None
    if args.base:
        # As on the pull request: the base's policy and, where the spec exists there, its spec and
        # the tree its truth comes from (the base branch's tip, as ``check`` reads them).
        choice = _policy_in_force(repo, args, args.base, "HEAD")
        loaded, rules = choice.loaded, choice.rules
    loaded = loaded or _load_policy(repo, args)
    try:
        ref = SpecRef.parse(args.spec)
    except ValueError as exc:
        raise GateError(str(exc), hint="copy the spec id from the report, e.g. gate/rms_gate.py::rmsnorm") from None
    if not (repo / ref.file).is_file():
        raise GateError(f"{ref.file}: no such spec file in {repo}")
    chk = loaded.policy.check(args.check)
    if args.growth and (args.case or args.check != "equivalence" or ":" not in args.growth):
        raise GateError(f"--growth {args.growth!r}: give DIM:DTYPE, e.g. --growth n:bfloat16, with the equivalence "
                        f"check and without --case", hint="copy the command from the error-growth finding")
    options = {**chk.options(), "shrink": False, "growth": bool(args.growth)}
    if args.growth:
        options["growth_only"] = args.growth
    seed = args.seed if args.seed is not None else job_seed(None, loaded.policy)
    if args.seed is not None:
        options["seed"] = args.seed
    if rules is not None:
        from . import git
        from .protocol.jobs import BASE_SPEC, TRUTH

        try:
            base_source = git.show(repo, rules, ref.file).decode("utf-8", errors="replace")
        except git.GitError:
            say(f"note: {ref.file} does not exist at the base ({rules[:12]}): the work tree's spec judges")
        head_source = (repo / ref.file).read_text(encoding="utf-8", errors="replace")
        if base_source is not None and base_source != head_source:
            from .rules.plumbing import between_sources

            options[BASE_SPEC] = {"file": ref.file, "name": ref.name, "source": base_source,
                                  "reference_changed": False, "rule_changes": loaded.policy.rule_changes,
                                  "commit": rules,
                                  "plumbing": between_sources(ref.file, ref.name, base_source, head_source)}
        if base_source is not None:
            options[TRUTH] = rules
    job = Job(id=f"{args.check}:{ref.id}", check=args.check, level="required", kernels=(), spec=ref,
              options=options, seed=seed, case=args.case)
    gpus = detect_gpus() if not args.cpu else ()
    from contextlib import nullcontext

    from .commands.head_tree import commit_tree
    from .protocol.jobs import TRUTH as TRUTH_KEY

    with commit_tree(repo, rules) if TRUTH_KEY in options and rules else nullcontext(None) as truth:
        opts = ExecOptions(repo_root=repo, gpus=gpus[:1], timeout_s=args.job_timeout or 600,
                           truth_roots=((rules, truth),) if truth is not None and rules else ())
        r = run_one(job, opts, gpus[0] if gpus else None)
    out.verdict(progress_line(r, 1, 1, r.duration_s, out.colour()))
    for f in r.findings:
        say(f"{f.kind}: {f.message}")
    growth = r.extra.get("growth") if args.growth else None
    for curve in (growth.get("curves") or [growth]) if growth else []:
        say(f"error by length along {curve['dim']!r} in {curve['dtype']} (slope {curve['slope_candidate']} vs torch's "
            f"{curve['slope_baseline']}):")
        for row in curve["rows"]:
            say(f"  {row['size']:>8}  {row['candidate']:.3g}  torch {row['baseline']:.3g}")
    if r.reason:
        say(f"reason: {r.reason}")
    return int(ExitCode.PASSED if r.status.value == "passed" else ExitCode.POLICY_BREACHED)


def cmd_demo(args: argparse.Namespace) -> int:
    from .commands.demo import run_demo

    passed_on = [{0: "-q", 2: "-v"}[out.level()]] if out.level() != out.Level.NORMAL else []
    return run_demo(Path(args.out), main, gpu=args.gpu, flags=[*passed_on, "--color", "always" if out.colour() else "never"])


def cmd_init(args: argparse.Namespace) -> int:
    from .commands.init import run_init

    return run_init(_repo(args), specs_dir=args.specs_dir, kernel=args.kernel, force=args.force)


def cmd_vendor(args: argparse.Namespace) -> int:
    from .commands.vendor import run_vendor

    return run_vendor(args.dir, check_only=args.check)


def cmd_doctor(args: argparse.Namespace) -> int:
    from .commands.doctor import doctor_main, run_doctor

    thresholds, source = _doctor_limits(args)
    if args.json or not out.quiet():
        return doctor_main(json_output=args.json, thresholds=thresholds, limits_from=source)
    report = run_doctor(thresholds=thresholds)  # -q: the problems and one verdict line
    for problem in report.problems:
        out.error(f"doctor: {problem}")
    out.verdict("doctor: healthy" if report.healthy else f"doctor: unfit, {len(report.problems)} problem(s)")
    return int(ExitCode.PASSED if report.healthy else ExitCode.POLICY_BREACHED)


def _doctor_limits(args: argparse.Namespace) -> tuple[Any, str | None]:
    """The repository's `runner.health` (--policy, else the .gpu-gate.yml of the git checkout
    around the current directory), so that doctor judges a GPU as `check` will; else the
    built-in limits. Without a policy list of tools, doctor requires every tool."""
    from . import git
    from .errors import GitError
    from .policy import load_policy

    try:
        repo: Path | None = git.repo_root(Path.cwd())
    except GitError:
        repo = None
    if args.policy is None and (repo is None or not any((repo / n).is_file() for n in (".gpu-gate.yml", ".gpu-gate.yaml"))):
        return None, None
    loaded = load_policy(repo or Path.cwd(), args.policy)
    for w in loaded.warnings:
        warn(w)
    from .commands.check import health_limits

    return health_limits(loaded.policy, None), loaded.source


# --- parser ----------------------------------------------------------------------------------

def _common() -> argparse.ArgumentParser:
    """-q/-v/--color, on every subcommand (a parent parser)."""
    common = argparse.ArgumentParser(add_help=False)
    loud = common.add_mutually_exclusive_group()
    loud.add_argument("-q", "--quiet", dest="level", action="store_const", const=out.Level.QUIET,
                      default=out.Level.NORMAL, help="only the verdict line and errors")
    loud.add_argument("-v", "--verbose", dest="level", action="store_const", const=out.Level.VERBOSE,
                      help="more detail: every finding of every job, whole messages, notes")
    common.add_argument("--color", "--colour", dest="color", choices=["auto", "always", "never"], default="auto",
                        help="colour verdicts and statuses (default auto: on a terminal, off under GitHub Actions, "
                             "with NO_COLOR set or TERM=dumb)")
    return common


def version_text() -> str:
    """``gpu-gate --version``: the command and the installed distribution's version."""
    from importlib import metadata

    try:
        return f"gpu-gate {metadata.version(DISTRIBUTION)} (distribution {DISTRIBUTION})"
    except metadata.PackageNotFoundError:
        from . import __version__

        return f"gpu-gate {__version__} (distribution {DISTRIBUTION}, not installed: run from a source tree)"


def build_parser() -> argparse.ArgumentParser:
    from .github.publish_args import add_publish_args

    common = _common()
    p = argparse.ArgumentParser(
        prog="gpu-gate",
        description="A merge gate for GPU kernels: finds the CUDA and Triton kernels a change touches, checks them "
                    "against a float64 reference, under compute-sanitizer and with compile checks, and applies the "
                    "repository's policy (.gpu-gate.yml).",
        epilog="exit codes: 0 passed, 1 policy breached, 2 usage or config error, 3 internal error")
    p.add_argument("--version", action="version", version=version_text())
    sub = p.add_subparsers(dest="command", metavar="COMMAND")
    parser = sub.add_parser

    def add_parser(name: str, **kw: Any) -> argparse.ArgumentParser:
        return parser(name, parents=[common], **kw)

    c = add_parser("check", help="run the gate: plan, run every job, write reports, exit with the verdict",
                       description="Find the kernels changed between --base and --head, run the policy's checks on "
                                   "them in isolated subprocesses, and write JUnit, Markdown, SARIF and JSON reports.")
    _add_selection(c)
    _add_spec_choice(c)
    _add_format(c)
    c.add_argument("--out", default=DEFAULT_OUT, help=f"report directory (default: {DEFAULT_OUT})")
    c.add_argument("--shard", help="run only shard I/N of the plan (for a GitHub Actions matrix)")
    c.add_argument("--plan", type=Path, help="run the jobs of this plan file instead of planning again")
    c.add_argument("--jobs", type=int, help="jobs at once without a GPU (default: 2); with GPUs: one per GPU")
    c.add_argument("--job-timeout", type=float, help="seconds before a job is killed (default: the policy's)")
    c.add_argument("--cpu", action="store_true", help="ignore any GPU: run what can run on the CPU")
    c.add_argument("--no-cache", action="store_true", help="do not reuse cached results")
    c.add_argument("--cache-dir", help="result cache directory (default: the policy's cache.dir)")
    c.add_argument("--keep-job-dirs", action="store_true", help="keep each job's directory (logs, sanitizer XML)")
    c.add_argument("--work-dir", default=os.environ.get("GPU_GATE_WORK_DIR"),
                   help="where job directories are made (default: $GPU_GATE_WORK_DIR, else the system temp dir)")
    c.add_argument("--worker-python", help="the interpreter of the workers (never of the judge): the python of the venv "
                   "that a sandboxed setup installed the repository into (default: gpu-gate's own)")
    c.add_argument("--github", action="store_true", default=None, help="post the PR comment and check run")
    add_publish_args(c)
    c.set_defaults(func=cmd_check)

    pl = add_parser("plan", help="print the plan (jobs = spec x check) as JSON; no torch, no GPU",
                        description="Print the jobs the gate would run, as JSON. With --shards N, also a GitHub "
                                    "Actions matrix under the key 'matrix'.")
    _add_selection(pl)
    _add_spec_choice(pl)
    pl.add_argument("--format", choices=["json"], default="json", help="the plan is JSON (the only format)")
    pl.add_argument("--shard", help="only the jobs of shard I/N")
    pl.add_argument("--shards", type=int, help="add a matrix of N shards")
    pl.add_argument("--output", type=Path, help="write the JSON here instead of stdout")
    _add_launch_cache(pl)
    pl.set_defaults(func=cmd_plan)

    r = add_parser("report", help="merge results.json files from shards and write the reports",
                       description="Merge the results of one or more check shards, decide the verdict with the "
                                   "policy, write the reports and optionally publish them to GitHub.")
    r.add_argument("results", nargs="*", help="results.json files written by `gpu-gate check`")
    _add_policy(r)
    r.add_argument("--out", default=DEFAULT_OUT, help=f"report directory (default: {DEFAULT_OUT})")
    r.add_argument("--expect-plan", type=Path, help="the plan: jobs without a result (a lost shard) then fail")
    r.add_argument("--github", action="store_true", default=None,
                   help="post the PR comment and check run (default: on in GitHub Actions with a token)")
    r.add_argument("--no-github", dest="github", action="store_false")
    add_publish_args(r)
    r.set_defaults(func=cmd_report)

    v = add_parser("validate-policy", help="validate a .gpu-gate.yml; exit 0 if valid, 2 if not",
                       description="Validate a policy file and print every problem as path:line:col.")
    v.add_argument("path", nargs="?", type=Path, help="policy file (default: .gpu-gate.yml)")
    v.add_argument("--strict", action="store_true", help="unknown keys are errors, not warnings")
    v.add_argument("--staged", action="store_true", help="validate the policy as staged in the index (what `git "
                                                          "commit` would record), not the work tree's file")
    v.add_argument("--repo", type=Path, default=None, help="repository, with --staged (default: the current one)")
    v.set_defaults(func=cmd_validate_policy)

    lk = add_parser("list-kernels", help="the changed kernels, what each depends on, which specs cover it",
                        description="List changed kernels (directly or through an include/import) and their specs.")
    _add_selection(lk)
    _add_spec_choice(lk)
    _add_format(lk)
    lk.add_argument("--staged", action="store_true", help="the changes staged in the index against HEAD (what `git "
                                                           "commit` would record; for a pre-commit hook)")
    _add_launch_cache(lk)
    lk.set_defaults(func=cmd_list_kernels)

    rp = add_parser("repro", help="re-run one recorded case of a spec",
                        description="Re-run exactly one case, as printed in a report: "
                                    "gpu-gate repro SPEC_FILE::NAME --case TOKEN")
    rp.add_argument("spec", help="spec id, PATH::NAME")
    rp.add_argument("--case", help="case token from the report (default: the spec's canonical cases)")
    rp.add_argument("--check", default="equivalence", help="check to run (default: equivalence)")
    rp.add_argument("--growth", metavar="DIM:DTYPE",
                    help="re-run the error-growth sweep along reduction dim DIM in DTYPE instead of cases")
    rp.add_argument("--seed", type=int, help="seed for the sweep or the canonical cases (a case token has its own)")
    rp.add_argument("--base", help="judge as the pull request was: by the spec and the policy at the merge base with "
                                   "this ref (the reports' repro commands name it)")
    rp.add_argument("--repo", type=Path, default=None)
    rp.add_argument("--cpu", action="store_true", help="run on the CPU even with a GPU")
    rp.add_argument("--job-timeout", type=float)
    _add_policy(rp)
    rp.set_defaults(func=cmd_repro)

    d = add_parser("demo", help="build an example repository with two changed kernels and gate it",
                   description="Create a small git repository (one correct and one buggy kernel change) in "
                               "OUT/repo, run `gpu-gate check` on it, write the reports to OUT/reports and show "
                               "the verdicts. Nothing is deleted afterwards.")
    d.add_argument("--out", default=DEMO_OUT, help=f"a new or empty directory for the demo (default: {DEMO_OUT})")
    d.add_argument("--gpu", action="store_true", help="use the GPU if there is one (default: the CPU, as in CI)")
    d.set_defaults(func=cmd_demo)

    dr = add_parser("doctor", help="check this runner's GPU health and toolchain (NVML)",
                        description="Report driver, CUDA, GPU health (ECC, throttling, other processes) and tool "
                                    "versions; exit 1 with one line per problem.")
    dr.add_argument("--json", action="store_true", help="print JSON")
    dr.add_argument("--policy", type=Path, help="take the limits from this policy's runner.health (default: the "
                                                 ".gpu-gate.yml of the checkout around the current directory, if any)")
    dr.set_defaults(func=cmd_doctor)

    i = add_parser("init", help="write a starter .gpu-gate.yml and a spec skeleton for a kernel found here",
                   description="In a git repository: write a starter policy (.gpu-gate.yml, with comments), a gate "
                               "spec skeleton for a kernel found in the repository (its reference is a TODO to fill "
                               "in), and add .gpu-gate/ to .gitignore. Existing files are kept unless --force.")
    i.add_argument("--repo", type=Path, default=None, help="repository (default: the current one)")
    i.add_argument("--specs-dir", default="gate", help="where the spec skeleton goes (default: gate)")
    i.add_argument("--kernel", help="the kernel file to write a spec for (default: the first one found)")
    i.add_argument("--force", action="store_true", help="overwrite .gpu-gate.yml and the spec skeleton if they exist")
    i.set_defaults(func=cmd_init)

    ve = add_parser("vendor", help="copy the GitHub action into DIR of your repository, for `uses: $/DIR`",
                    description="Copy what gpu-gate's GitHub action runs (action.yml, the gpu_gate package, "
                                "pyproject.toml, LICENSE, NOTICE) into DIR, with a manifest of checksums, and print "
                                "the workflow steps that use it. An earlier vendored copy in DIR is replaced.")
    ve.add_argument("dir", type=Path, help="where the action goes, e.g. .github/actions/gpu-gate")
    ve.add_argument("--check", action="store_true",
                    help="only verify DIR against its manifest: exit 0 when it is intact, 1 with one line per file")
    ve.set_defaults(func=cmd_vendor)
    return p


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "func", None):
        parser.print_help()
        return ExitCode.USAGE_ERROR
    with out.session(args.level, json_stdout=_json_on_stdout(args), colour=args.color), scancache.using(None):
        return _run(args)


def _json_on_stdout(args: argparse.Namespace) -> bool:
    """Whether stdout carries a JSON answer, so that human text goes to stderr."""
    if args.command == "plan":
        return args.output is None
    if args.command == "doctor":
        return bool(args.json)
    return getattr(args, "format", "text") == "json"


def _run(args: argparse.Namespace) -> int:
    try:
        return int(args.func(args))
    except GateError as exc:
        out.error(f"gpu-gate: error: {exc}")
        return int(exc.exit_code)
    except ValueError as exc:  # bad --shard and similar argument values
        out.error(f"gpu-gate: error: {exc}")
        return int(ExitCode.USAGE_ERROR)
    except KeyboardInterrupt:
        out.error("gpu-gate: interrupted")
        return int(ExitCode.INTERNAL_ERROR)
    except Exception as exc:  # noqa: BLE001
        import traceback

        traceback.print_exc()
        out.error(f"gpu-gate: internal error: {type(exc).__name__}: {exc} (if you are a user and see this, please "
                  f"report it)")
        return int(ExitCode.INTERNAL_ERROR)


if __name__ == "__main__":
    sys.exit(main())
