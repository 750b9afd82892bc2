"""The ``gpu-gate`` command line: it parses, and nothing else. Each verb's arguments become a frozen
request record (gpu_gate.commands.request) handed to the verb's module under gpu_gate/commands/,
which acts. Domain errors are caught here, once, and printed as one line.

Nothing here imports torch: ``--help``, ``plan``, ``report`` and ``validate-policy``
run on machines without a GPU stack.
"""
from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from .commands import output as out
from .commands.request import CacheChoice, PlanRequest, PolicyFile, Publishing, ReportOutput
from .store import scans as scancache
from .errors import GateError
from .exitcodes import ExitCode

DEFAULT_OUT = ".gpu-gate/out"
DEMO_OUT = "gpu-gate-demo"


DISTRIBUTION = "gpu-kernel-gate"  # the name on the package index; the command is gpu-gate


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


# --- from the parsed arguments to each verb's request ------------------------------------------

def _policy_file(args: argparse.Namespace) -> PolicyFile:
    return PolicyFile(args.policy, args.strict)


def _plan_request(args: argparse.Namespace) -> PlanRequest:
    """``check``, ``plan`` and ``list-kernels``: what to plan."""
    return PlanRequest(repo=args.repo, base=args.base, head=args.head, staged=getattr(args, "staged", False),
                       every_spec=args.all_specs, only=tuple(args.spec or ()), policy=_policy_file(args),
                       cache=CacheChoice(enabled=not args.no_cache, dir=args.cache_dir))


def _publishing(args: argparse.Namespace, github: bool) -> Publishing:
    return Publishing(github=github, comment_mode=args.comment_mode, pr=args.pr, sha=args.sha)


def cmd_check(args: argparse.Namespace) -> int:
    from .commands import check

    output = ReportOutput(Path(args.out), json=args.format == "json", publishing=_publishing(args, bool(args.github)))
    return check.run(check.CheckRequest(
        plan=_plan_request(args), output=output, plan_file=args.plan, shard=args.shard, jobs=args.jobs,
        job_timeout=args.job_timeout, cpu=args.cpu, full=args.full, keep_job_dirs=args.keep_job_dirs, work_dir=args.work_dir,
        worker_python=args.worker_python))


def cmd_plan(args: argparse.Namespace) -> int:
    from .commands import plan

    return plan.run(_plan_request(args), shard=args.shard, shards=args.shards, output=args.output)


def cmd_list_kernels(args: argparse.Namespace) -> int:
    from .commands import list_kernels

    return list_kernels.run(_plan_request(args), json_format=args.format == "json")


def cmd_report(args: argparse.Namespace) -> int:
    from .commands import report

    return report.run(report.ReportRequest(
        results=tuple(Path(p) for p in args.results), out=Path(args.out), expect_plan=args.expect_plan,
        github=args.github, publishing=_publishing(args, False), policy=_policy_file(args)))


def cmd_validate_policy(args: argparse.Namespace) -> int:
    from .commands import validate_policy

    return validate_policy.run(args.path, strict=args.strict, staged=args.staged, repo=args.repo)


def cmd_repro(args: argparse.Namespace) -> int:
    from .commands import repro

    return repro.run(repro.ReproRequest(
        spec=args.spec, case=args.case, check=args.check, growth=args.growth, seed=args.seed, base=args.base,
        repo=args.repo, cpu=args.cpu, job_timeout=args.job_timeout, policy=_policy_file(args)))


def cmd_demo(args: argparse.Namespace) -> int:
    from .commands import demo

    return demo.run(Path(args.out), main, gpu=args.gpu)


def cmd_audit(args: argparse.Namespace) -> int:
    from .commands import audit, output

    json_stdout = args.format == "json"
    if args.merge:
        return audit.merge(args.merge, Path(args.out), json_stdout=json_stdout)
    if args.problems is None or args.submissions is None:
        raise GateError("gpu-gate audit needs --problems and --submissions (or --merge to join shards' tables)",
                        hint="gpu-gate audit --problems DIR --submissions DIR --out OUT")
    shard = None
    if args.shard:
        from .plan import parse_shard

        try:
            shard = parse_shard(args.shard)
        except ValueError as e:
            raise GateError(str(e), hint="--shard I/N, e.g. --shard 1/4") from None
    passed_on = [{0: "-q", 2: "-v"}[output.level()]] if output.level() != output.Level.NORMAL else ["-q"]
    return audit.run(args.problems, args.submissions, Path(args.out), main, cpu=not args.gpu,
                     dtypes=[d for d in (args.dtypes or "").split(",") if d], policy=args.policy_file,
                     flags=[*passed_on, "--color", "always" if output.colour() else "never"], shard=shard,
                     json_stdout=json_stdout)


def cmd_init(args: argparse.Namespace) -> int:
    from .commands import init

    return init.run(args.repo, specs_dir=args.specs_dir, kernel=args.kernel, force=args.force)


def cmd_vendor(args: argparse.Namespace) -> int:
    from .commands.vendor import run_vendor

    return run_vendor(args.dir, check_only=args.check)


def cmd_doctor(args: argparse.Namespace) -> int:
    from .commands import doctor

    return doctor.run(json_output=args.json, policy=args.policy)


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


def _check_parser(add_parser: Callable[..., argparse.ArgumentParser]) -> None:
    from .github.publish_args import add_publish_args

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
    c.add_argument("--full", action="store_true",
                   help="outside CI too, every equivalence case on the policy's budgets: no stop at the first "
                        "confirmed failure (stop_at_red: local) and no CPU cap (local_time_budget_s)")
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


def _plan_parser(add_parser: Callable[..., argparse.ArgumentParser]) -> None:
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


def _report_parser(add_parser: Callable[..., argparse.ArgumentParser]) -> None:
    from .github.publish_args import add_publish_args

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


def _validate_policy_parser(add_parser: Callable[..., argparse.ArgumentParser]) -> None:
    v = add_parser("validate-policy", help="validate a .gpu-gate.yml; exit 0 if valid, 2 if not",
                       description="Validate a policy file and print every problem as path:line:col.")
    v.add_argument("path", nargs="?", type=Path, help="policy file (default: .gpu-gate.yml)")
    v.add_argument("--strict", action="store_true", help="unknown keys are errors, not warnings")
    v.add_argument("--staged", action="store_true", help="validate the policy as staged in the index (what `git "
                                                          "commit` would record), not the work tree's file")
    v.add_argument("--repo", type=Path, default=None, help="repository, with --staged (default: the current one)")
    v.set_defaults(func=cmd_validate_policy)


def _list_kernels_parser(add_parser: Callable[..., argparse.ArgumentParser]) -> None:
    lk = add_parser("list-kernels", help="the changed kernels, what each depends on, which specs cover it",
                        description="List changed kernels (directly or through an include/import) and their specs.")
    _add_selection(lk)
    _add_spec_choice(lk)
    _add_format(lk)
    lk.add_argument("--staged", action="store_true", help="the changes staged in the index against HEAD (what `git "
                                                           "commit` would record; for a pre-commit hook)")
    _add_launch_cache(lk)
    lk.set_defaults(func=cmd_list_kernels)


def _repro_parser(add_parser: Callable[..., argparse.ArgumentParser]) -> None:
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


def _demo_parser(add_parser: Callable[..., argparse.ArgumentParser]) -> None:
    d = add_parser("demo", help="build an example repository with two changed kernels and gate it",
                   description="Create a small git repository (one correct and one buggy kernel change) in "
                               "OUT/repo, run `gpu-gate check` on it, write the reports to OUT/reports and show "
                               "the verdicts. Nothing is deleted afterwards.")
    d.add_argument("--out", default=DEMO_OUT, help=f"a new or empty directory for the demo (default: {DEMO_OUT})")
    d.add_argument("--gpu", action="store_true", help="use the GPU if there is one (default: the CPU, as in CI)")
    d.set_defaults(func=cmd_demo)


def _audit_parser(add_parser: Callable[..., argparse.ArgumentParser]) -> None:
    a = add_parser("audit", help="judge benchmark submissions (KernelBench, SOL-ExecBench) against their problems",
                   description="For every submission under SUBMISSIONS (a KernelBench module with ModelNew, or a "
                               "SOL-ExecBench solution JSON), find its problem under PROBLEMS (a module with Model, "
                               "get_inputs, get_init_inputs; or a definition JSON with its workloads), write a gate "
                               "spec from the problem, and gate the submission as a pull request against the "
                               "problem's own reference: same judge, sandbox, cases and findings as `check`. Writes "
                               "OUT/audit.md, audit.json and audit.xml; keeps each submission's repository and "
                               "reports under OUT.")
    a.add_argument("--problems", type=Path,
                   help="a directory of problem modules or definitions with their workloads (or one file)")
    a.add_argument("--submissions", type=Path,
                   help="a directory of submissions: a KernelBench module in a directory named after its problem "
                        "or named PROBLEM_*.py; a solution JSON names its definition (or one file)")
    a.add_argument("--out", default="gpu-gate-audit", help="a new or empty directory (default: gpu-gate-audit)")
    a.add_argument("--dtypes", help="more float dtypes to draw inputs in, comma-separated (default: the problem's own)")
    a.add_argument("--policy", dest="policy_file", type=Path,
                   help="a .gpu-gate.yml for every submission's gate (default: the default preset)")
    a.add_argument("--gpu", action="store_true", help="use the GPU if there is one (default: the CPU and the "
                                                      "Triton interpreter)")
    a.add_argument("--shard", help="only shard I/N of the submissions (sorted, dealt round-robin): one runner of a "
                                   "matrix; join the shards' tables with --merge")
    a.add_argument("--merge", nargs="+", type=Path, metavar="DIR",
                   help="instead of auditing, join the tables of these shards' --out directories into --out")
    _add_format(a)
    a.set_defaults(func=cmd_audit)


def _doctor_parser(add_parser: Callable[..., argparse.ArgumentParser]) -> None:
    dr = add_parser("doctor", help="check this runner's GPU health and toolchain (NVML)",
                        description="Report driver, CUDA, GPU health (ECC, throttling, other processes) and tool "
                                    "versions; exit 1 with one line per problem.")
    dr.add_argument("--json", action="store_true", help="print JSON")
    dr.add_argument("--policy", type=Path, help="take the limits from this policy's runner.health (default: the "
                                                 ".gpu-gate.yml of the checkout around the current directory, if any)")
    dr.set_defaults(func=cmd_doctor)


def _init_parser(add_parser: Callable[..., argparse.ArgumentParser]) -> None:
    i = add_parser("init", help="write a starter .gpu-gate.yml and a spec skeleton for a kernel found here",
                   description="In a git repository: write a starter policy (.gpu-gate.yml, with comments), a gate "
                               "spec skeleton for a kernel found in the repository (its reference is a TODO to fill "
                               "in), and add .gpu-gate/ to .gitignore. Existing files are kept unless --force.")
    i.add_argument("--repo", type=Path, default=None, help="repository (default: the current one)")
    i.add_argument("--specs-dir", default="gate", help="where the spec skeleton goes (default: gate)")
    i.add_argument("--kernel", help="the kernel file to write a spec for (default: the first one found)")
    i.add_argument("--force", action="store_true", help="overwrite .gpu-gate.yml and the spec skeleton if they exist")
    i.set_defaults(func=cmd_init)


def _vendor_parser(add_parser: Callable[..., argparse.ArgumentParser]) -> None:
    ve = add_parser("vendor", help="copy the GitHub action into DIR of your repository, for `uses: $/DIR`",
                    description="Copy what gpu-gate's GitHub action runs (action.yml, the gpu_gate package, "
                                "pyproject.toml, LICENSE, NOTICE) into DIR, with a manifest of checksums, and print "
                                "the workflow steps that use it. An earlier vendored copy in DIR is replaced.")
    ve.add_argument("dir", type=Path, help="where the action goes, e.g. .github/actions/gpu-gate")
    ve.add_argument("--check", action="store_true",
                    help="only verify DIR against its manifest: exit 0 when it is intact, 1 with one line per file")
    ve.set_defaults(func=cmd_vendor)


def build_parser() -> argparse.ArgumentParser:
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

    for add in (_check_parser, _plan_parser, _report_parser, _validate_policy_parser, _list_kernels_parser,
                _repro_parser, _demo_parser, _audit_parser, _doctor_parser, _init_parser, _vendor_parser):  # --help's order
        add(add_parser)
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
