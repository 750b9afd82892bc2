"""The pipeline of ``gpu-gate check``: plan → result cache → doctor → execute → verdict → reports.

``cli.py`` parses the arguments and makes the plan; this module runs the rest, in that order. It
stays on the gate's side of the trust boundary: jobs run through :mod:`gpu_gate.executor` (a judge
and its sandboxed workers each), and everything here reads their results as data.
"""
from __future__ import annotations

import argparse
import contextlib
import dataclasses
import json
import os
import shutil
import tempfile
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..store import bytecode
from . import output as out
from ..errors import GateError
from ..exitcodes import ExitCode

if TYPE_CHECKING:
    from ..plan import Plan
    from ..policy import LoadedPolicy
    from ..record import RunRecord


def _in_actions() -> bool:
    return os.environ.get("GITHUB_ACTIONS") == "true"


def say(msg: str = "") -> None:
    out.say(msg)


def warn(msg: str) -> None:
    out.warn(msg)


def check(repo: Path, loaded: LoadedPolicy, plan: Plan, args: argparse.Namespace, cache_dir: Path | None) -> int:
    """The whole run of ``gpu-gate check`` once the plan is made: the jobs (from the result cache, or
    run after the doctor has vetted the runner), the verdict, the reports. Returns the exit code."""
    from ..executor.slots import detect_gpus
    from ..plan import parse_shard, shard
    from ..record import RunRecord
    from ..report.outdir import tracked_findings
    from ..report.paths import runner_roots

    all_ids = [j.id for j in plan.jobs]
    jobs = plan.jobs
    if args.shard:
        i, n = parse_shard(args.shard)
        jobs = shard(jobs, i, n)
    policy = loaded.policy
    gpus = detect_gpus() if not args.cpu else ()
    if isinstance(policy.runner.gpus, int):
        gpus = gpus[: policy.runner.gpus]
    record = RunRecord(base=plan.base, head=plan.head, rules=plan.rules, policy_source=loaded.source,
                       kernels=plan.kernels,
                       plan_findings=list(plan.findings), planned_jobs=[j.id for j in jobs] if args.shard else all_ids,
                       shard=args.shard, environment=_environment(gpus), notes=list(plan.notes),
                       selected={sid: why for sid, why in plan.selected.items()
                                 if any(j.spec is not None and j.spec.id == sid for j in jobs)})
    record.changed_lines = {sid: lines for sid, lines in plan.changed_lines.items() if sid in record.selected}
    record.plan_findings += tracked_findings(repo, [Path(args.out), *([cache_dir] if cache_dir else [])], plan.head)
    if not gpus:
        record.notes.append("no GPU on this machine: GPU-only checks are reported as not run")
    roots = runner_roots([repo])
    if not jobs:
        quiet = not plan.kernels and not plan.selected and not plan.findings
        say("no kernel changes" if quiet else "no jobs to run")
    else:
        for sid, why in sorted(record.selected.items()):
            say(f"spec {sid}: {'; '.join(why)}")
        start = time.monotonic()
        with _head_checkout(repo, plan.head, policy, args) as head, \
                _base_checkout(repo, plan.base, jobs, record) as base_tree, \
                _truth_checkout(repo, jobs, plan.base, base_tree, record) as truth:
            record.notes += head.notes()
            ready = {"trees": time.monotonic() - start}
            record.results = _run_jobs(jobs, head.path, policy, gpus, args, record, base_tree, ready,
                                       home=repo, head=head, truth=truth)
            record.places = _places(record, head.path)
            # the work trees' paths, while they exist (a truth tree is the repository's too)
            roots = runner_roots([repo, head.path, *truth.values()], base_tree)
        _remember_launches(plan, record, cache_dir)
    return finish(record, loaded, Path(args.out), args, roots)


def _places(record: RunRecord, tree: Path) -> dict[str, list[dict[str, Any]]]:
    """Where each spec job's findings with no line go, read from the head's own files now: the
    reports may be published later from a checkout of another commit."""
    from ..report import locate

    out: dict[str, list[dict[str, Any]]] = {}
    seen: dict[tuple[str, tuple[str, ...]], list[dict[str, Any]]] = {}  # a spec's jobs share their places
    for r in record.results:
        if r.spec:
            key = (r.spec, tuple(r.kernels))
            if key not in seen:
                seen[key] = locate.recorded(locate.places(tree, r.spec, r.kernels, record.changed_lines.get(r.spec)))
            if seen[key]:
                out[r.job_id] = seen[key]
    return out


def _shared_gpu_nodes(gpus: Sequence[str], box: Any) -> list[str]:
    """A note for each GPU whose jobs' sandbox holds every GPU's device node (see gpu_nodes): on a
    runner with several GPUs, a job there could reach the GPUs other jobs are judged on."""
    from ..executor.argv import job_gpu

    notes = []
    for g in gpus:
        own = job_gpu(g, box)
        if own is not None and own.whole is not None:
            notes.append(f"sandbox: the jobs on GPU {g} hold every GPU's device node: {own.whole}")
    return notes


def _environment(gpus: tuple[str, ...]) -> dict[str, Any]:
    import platform

    from .. import __version__

    return {"gpu_gate": __version__, "python": platform.python_version(), "gpus": list(gpus),
            "device": "cuda" if gpus else "cpu"}


def tools_needed(jobs: Sequence[Any]) -> tuple[str, ...]:
    """What a runner must have for these jobs: torch always; compute-sanitizer for sanitizer
    checks; triton for Triton kernels; cupy (gg.cuda) for CUDA kernels, and nvcc to compile them."""
    from ..judge.checks import SANITIZER_TOOLS
    from ..cudascan import is_c_source

    kernels = [k for j in jobs for k in j.kernels]
    need = ["torch"]
    if any(j.check in SANITIZER_TOOLS for j in jobs):
        need.append("compute-sanitizer")
    if any(k.endswith(".py") for k in kernels):
        need.append("triton")
    if any(is_c_source(k) for k in kernels):
        need.append("cupy")
    if any(j.check == "compile" and any(is_c_source(k) for k in j.kernels) for j in jobs):
        need.append("nvcc")
    return tuple(need)


def health_limits(policy: Any, tools: tuple[str, ...] | None) -> Any:
    """The doctor's thresholds from the policy's `runner.health`. The tools it requires: the
    policy's list, else ``tools`` (what the jobs use), else the doctor's own default (all)."""
    from .doctor import Thresholds

    health = policy.runner.health
    limits = Thresholds(max_temperature_c=health.max_temperature_c, min_free_memory_mib=health.min_free_memory_mib,
                        allow_other_processes=health.allow_other_processes)
    required = tuple(health.required_tools) if health.required_tools is not None else tools
    return dataclasses.replace(limits, required_tools=required) if required is not None else limits


def _vet_runner(gpus: tuple[str, ...], pycache: Path | None, policy: Any, jobs: Sequence[Any]) -> Any:
    """Before the first job on a GPU runner: refuse to trust an unhealthy GPU. The doctor examines
    the GPUs this run would use, with the policy's thresholds; a GPU with a problem is left out,
    and a runner with no healthy GPU, or with a problem of its own, is unfit (a blocking finding
    per problem)."""
    from .doctor import judge_runner, run_doctor

    thresholds = health_limits(policy, tools_needed(jobs))
    start = time.monotonic()
    report = run_doctor(thresholds=thresholds, pycache=pycache, visible=gpus)
    verdict = judge_runner(report)
    _say_verdict(report, verdict, time.monotonic() - start)
    return verdict


def _say_verdict(report: Any, verdict: Any, took: float, unfit: str = "its GPU jobs will not run:") -> None:
    """The doctor's verdict, in the run's log: unfit and why (then ``unfit``: what becomes of the
    jobs), or the healthy GPUs and any left out."""
    if verdict.blocking:
        say(f"doctor: this runner is unfit, {len(verdict.blocking)} problem(s) in {took:.1f}s; {unfit}")
        for f in verdict.blocking:
            say(f"  - {f.message}")
        return
    if report is None:
        return
    names = ", ".join(sorted({g.name or "unknown GPU" for g in report.gpus if not g.problems}))
    say(f"doctor: {len(verdict.usable)} GPU(s) healthy ({names}) in {took:.1f}s")
    for f in verdict.excluded:
        say(f"doctor: {f.message}")


class _DoctorBeside:
    """The doctor on a one-GPU runner, beside the first jobs: the GPU's own health (NVML:
    temperature, memory, ECC, other processes) is examined before any job starts, since the jobs'
    processes would then count as other processes; the tools' probes (compute-sanitizer, CUDA
    through torch and CuPy: seconds) run on a thread while the jobs start. A runner they find unfit
    has its jobs cancelled at once, and every job is reported not run, as if none had started: no
    result from an unfit runner is ever kept or judged."""

    REASON = "the runner failed its health check"

    def __init__(self, gpus: tuple[str, ...], pycache: Path | None, policy: Any, jobs: Sequence[Any],
                 control: Any) -> None:
        import threading

        from . import doctor

        self.control = control
        self.thresholds = health_limits(policy, tools_needed(jobs))
        self.start = time.monotonic()
        self.exam = doctor.examine_gpus(thresholds=self.thresholds, visible=gpus)
        self.pycache = pycache
        self._verdict: Any = None
        self.now: Any = None  # a verdict before any job: the GPU itself has a problem
        if self.exam.problems or any(g.problems for g in self.exam.gpus):
            self._finish(started=False)
            self.now = self._verdict
            return
        self._thread = threading.Thread(target=self._finish, name="gpu-gate-doctor", daemon=True)
        self._thread.start()

    def _finish(self, started: bool = True) -> None:
        from . import doctor
        from ..findings import Finding, Severity

        try:
            report = doctor.complete(self.exam, pycache=self.pycache)
            verdict = doctor.judge_runner(report)
        except Exception as exc:  # noqa: BLE001 - a doctor that cannot say is not a healthy runner
            report = None
            verdict = doctor.RunnerVerdict([], [Finding(check="doctor", kind="infrastructure", severity=Severity.ERROR,
                                                        message=f"the runner's health check failed: {exc}")], [])
        if verdict.blocking:
            self.control.cancel(self.REASON)
        _say_verdict(report, verdict, time.monotonic() - self.start,
                     *(["its jobs are stopped and reported not run:"] if started else []))
        self._verdict = verdict

    def verdict(self) -> Any:
        from . import doctor
        from ..findings import Finding, Severity

        if self._verdict is None:
            self._thread.join()
        if self._verdict is None:  # it could not say: fail closed
            return doctor.RunnerVerdict([], [Finding(check="doctor", kind="infrastructure", severity=Severity.ERROR,
                                                     message="the runner's health check did not finish")], [])
        return self._verdict


def _remember_launches(plan: Plan, record: RunRecord, cache_dir: Path | None) -> None:
    """Keep what each spec launched, keyed by the content it ran on, for later plans."""
    from ..coverage import LaunchStore

    if cache_dir is None:
        return
    store = LaunchStore(cache_dir)
    device = str(record.environment.get("device") or "cpu")
    for r in record.results:
        key = plan.launch_keys.get(r.spec or "")
        if key and isinstance(r.extra.get("launches"), dict):
            store.put(key, r.spec or "", device, r.extra["launches"])


@contextlib.contextmanager
def _head_checkout(repo: Path, head: str | None, policy: Any, args: argparse.Namespace) -> Iterator[Any]:
    """The jobs run the head's code: with a head commit, a pristine export of it (never the work tree,
    which a build step could have rewritten), with the setup outputs the policy names; without one,
    the work tree (see :mod:`.head_tree`)."""
    from .head_tree import head_tree

    leave_out = [Path(args.out).resolve(), *([Path(args.cache_dir).resolve()] if args.cache_dir else []),
                 repo / policy.cache.dir]
    work_root = Path(args.work_dir) if args.work_dir else None
    with head_tree(repo, head, policy.setup_outputs, work_root=work_root, leave_out=leave_out) as tree:
        if tree.exported:
            say(f"head {tree.commit[:12] if tree.commit else ''}: the workers run an export of the commit, not the "
                f"work tree" + (f" ({len(tree.taken)} setup output(s) taken)" if tree.taken else ""))
        yield tree


@contextlib.contextmanager
def _base_checkout(repo: Path, base: str | None, jobs: Sequence[Any], record: Any) -> Iterator[Path | None]:
    """The base's code, for the jobs that run it beside the head's on the same cases (differential
    runs): a temporary work tree at the base. Without one, those jobs judge by absolute rules only,
    and the run says so (stricter, never looser)."""
    from .. import git
    from ..protocol.jobs import base_commit

    if base is None or not any(base_commit(j) for j in jobs):
        yield None
        return
    tmp = Path(tempfile.mkdtemp())  # a neutral name: the base's worker sees this path
    try:
        try:
            tree: Path | None = git.add_worktree(repo, base, tmp / "tree")
        except GateError as exc:
            tree = None
            why = f"the base's code could not be checked out ({exc}): failures are judged by absolute rules only"
            warn(why)
            record.notes.append(why)
        yield tree
    finally:
        if (tmp / "tree").exists():
            git.remove_worktree(repo, tmp / "tree")
        shutil.rmtree(tmp, ignore_errors=True)


@contextlib.contextmanager
def _truth_checkout(repo: Path, jobs: Sequence[Any], base: str | None, base_tree: Path | None,
                    record: Any) -> Iterator[dict[str, Path]]:
    """The tree the truth comes from, by commit: the rules' revision (the base branch's tip, see
    gpu_gate.policy.base), whose spec, reference and every repository module they import the reference
    worker loads (see gpu_gate.worker.reference). The differential runs' tree is reused when it is the
    same commit. One that cannot be checked out is left out: a reference that then needs the
    repository's code fails its job closed."""
    from ..protocol.jobs import truth_commit
    from .head_tree import commit_tree

    wanted = sorted({c for j in jobs if (c := truth_commit(j))})
    trees: dict[str, Path] = {}
    with contextlib.ExitStack() as stack:
        for commit in wanted:
            if commit == base and base_tree is not None:
                trees[commit] = base_tree
                continue
            try:
                trees[commit] = stack.enter_context(commit_tree(repo, commit))
            except GateError as exc:
                why = (f"the base's tree at {commit[:12]} could not be checked out ({exc}): a reference that needs the "
                       f"repository's code cannot be computed, and its jobs fail")
                warn(why)
                record.notes.append(why)
        yield trees


def _run_jobs(jobs: list[Any], repo: Path, policy: Any, gpus: tuple[str, ...], args: argparse.Namespace,
              record: Any, base_tree: Path | None = None, ready: dict[str, float] | None = None, *,
              home: Path | None = None, head: Any = None, truth: dict[str, Path] | None = None) -> list[Any]:
    """``repo``: the tree the jobs run (an export of the head commit, or the work tree); ``home``: the
    repository itself (where the result cache lives), by default ``repo``; ``head``: how ``repo`` was
    made (its setup outputs are part of the cache's key); ``truth``: the trees the references load
    from, by commit. ``ready``: how long each step before the first job took (the work trees, so
    far): the run says where the time before its first job went."""
    home = home or repo
    from ..executor import sandbox
    from ..executor.options import ExecOptions
    from ..executor.control import RunControl, cancel_on_signals, interrupted_finding
    from ..executor.scheduling import execute, sandbox_findings, shared_bytecode
    from ..report.console import gha_group, progress_line

    ready = dict(ready or {})
    lap = time.monotonic()

    def step(name: str) -> None:
        nonlocal lap
        now = time.monotonic()
        ready[name] = ready.get(name, 0.0) + now - lap
        lap = now

    box = sandbox.choose(policy.runner.sandbox)
    step("sandbox")
    record.plan_findings += sandbox_findings(box, policy.runner.sandbox)
    control = RunControl()
    cache = _cache(policy, repo, args, gpus, home=home, extra=head.fingerprint() if head is not None else None)
    todo, cached = [], []
    for j in jobs:
        hit = cache.lookup(j) if cache else None
        (cached.append(hit) if hit is not None else todo.append(j))
    step("result cache")
    start, end = gha_group(f"gpu-gate: {len(jobs)} jobs") if _in_actions() else ("", "")
    if start:
        say(start)
    colour = out.colour()
    work_root = Path(args.work_dir) if args.work_dir else None
    # Shared bytecode only for jobs that run: filling it imports torch (seconds), which a run served
    # from the cache does not wait for. It starts from what earlier runs kept (gpu_gate.store.bytecode),
    # where the sandbox keeps jobs from writing to it and the workers run the gate's interpreter.
    worker_python = getattr(args, "worker_python", None)
    store = bytecode.store_dir(cache.cache.dir) if cache and box.protects_files and not worker_python else None
    with (shared_bytecode(work_root, store) if todo else contextlib.nullcontext(None)) as pycache:
        # The doctor runs only when jobs are about to use the GPU (a run served from the cache does
        # not wait for it); its torch probe compiles the bytecode the jobs then share.
        step("bytecode")
        unfit: list[Any] = []
        beside: _DoctorBeside | None = None
        if gpus and todo:
            if len(gpus) == 1:
                # The GPU's own health before any job; the tools' probes beside the first jobs
                beside = _DoctorBeside(gpus, pycache, policy, todo, control)
                vetted = beside.now
            else:  # several GPUs: which of them run jobs is known before any starts
                vetted = _vet_runner(gpus, pycache, policy, todo)
            step("doctor")
            if vetted is not None:
                beside = None
                unfit = vetted.blocking
                record.plan_findings += vetted.blocking + vetted.excluded
                if vetted.usable:
                    gpus = tuple(vetted.usable)
        took = ", ".join(f"{k} {v:.1f}s" for k, v in ready.items() if v >= 0.05)
        say(("not running" if unfit else "running") + f" {len(todo)} jobs" +
            (f" ({len(cached)} cached)" if cached else "") + (f" on {len(gpus)} GPU(s)" if gpus else " on the CPU") +
            (f" (ready in {sum(ready.values()):.1f}s: {took})" if todo and took else "") +
            ("; the doctor probes the tools beside the first jobs" if beside is not None else ""))
        said: dict[str, int] = {}  # each reason a job did not run, said once
        for i, r in enumerate(cached, 1):
            _progress(progress_line(r, i, len(jobs), 0.0, colour, said), r)
        offset = len(cached)

        keeper = bytecode.Keeper(store if pycache is not None else None,
                                 (repo, home, base_tree, work_root, *(truth or {}).values()))

        def progress(r: Any, done: int, total: int, elapsed: float) -> None:
            keeper.take(r)  # the modules its worker imported without bytecode, compiled beside the other jobs
            _progress(progress_line(r, done + offset, total + offset, elapsed, colour, said), r)

        if unfit:
            results = [_not_run_on_unfit_runner(j, unfit) for j in todo]
            for i, r in enumerate(results, 1):
                progress(r, i, len(results), 0.0)
        else:
            record.notes += _shared_gpu_nodes(gpus, box)
            opts = ExecOptions(repo_root=repo, gpus=gpus,
                               timeout_s=args.job_timeout or policy.runner.job_timeout_minutes * 60,
                               run_deadline=time.monotonic() + policy.runner.run_timeout_minutes * 60,
                               workers=args.jobs or (len(gpus) or min(2, os.cpu_count() or 1)),
                               fail_fast=policy.runner.fail_fast, sanitizer_path=policy.cuda.sanitizer,
                               jobs_per_gpu=policy.runner.jobs_per_gpu, infrastructure=policy.runner.infrastructure,
                               keep_workdirs=Path(args.out) / "jobs" if args.keep_job_dirs else None,
                               work_root=work_root, pycache=pycache, sandbox_mode=policy.runner.sandbox,
                               sandbox=box, hide=(Path(args.out).resolve(), *([cache.cache.dir] if cache else []),
                                                  *_work_tree_hidden(home, head)),
                               base_root=base_tree, truth_roots=tuple(sorted((truth or {}).items())),
                               kernel_store=cache.cache.dir / "compiled" if cache else None,
                               worker_python=worker_python)
            with cancel_on_signals(control):
                results = execute(todo, opts, progress, control)
            if beside is not None:
                vetted = beside.verdict()
                record.plan_findings += vetted.blocking + vetted.excluded
                if vetted.blocking:  # whatever ran, ran on a runner that failed its health check
                    unfit = vetted.blocking
                    results = [_not_run_on_unfit_runner(j, unfit) for j in todo]
        for r in results:  # a job the progress line did not come through for
            keeper.take(r)
        kept, waited = keeper.finish()
        if kept:
            say(f"bytecode: kept {kept} module(s) of the runner's Python for later runs "
                f"({keeper.busy_s:.1f}s beside the jobs, {waited:.1f}s after them)")
    if control.reason and control.reason != _DoctorBeside.REASON:
        record.plan_findings.append(interrupted_finding(control.reason))
    if cache:
        # Unsandboxed jobs ran (none runs on an unfit runner, or under `required` without a sandbox).
        exposed = not box.protects_files and not unfit and policy.runner.sandbox != "required"
        _settle_cache(cache, todo, results, not exposed, control.reason)
    if end:
        say(end)
    return cached + results


def _work_tree_hidden(home: Path, head: Any) -> list[Path]:
    """Where the jobs run an export of the head commit, the work tree is out of their sight too: what
    a build step left there (an editable install points into it) is the jobs' only through the
    policy's ``setup_outputs``, copied into the export. The interpreters and gpu-gate stay shown
    where they live inside it (see executor.argv._layout)."""
    return [home.resolve()] if head is not None and head.exported else []


def _progress(line: str, result: Any) -> None:
    from ..report.console import job_details

    say(line)
    for detail in job_details(result) if out.verbose() else ():
        out.detail(detail)


def _settle_cache(cache: Any, todo: list[Any], results: list[Any], protected: bool, interrupted: str | None) -> None:
    """Store the new results, after every sandbox is gone. A run whose jobs could write the cache
    directory (no sandbox) stores nothing and empties it: what it holds is no longer the gate's."""
    if todo and not protected:
        import shutil

        # the compiled kernels kept between runs too: the jobs could have written them
        shutil.rmtree(cache.cache.dir / "compiled", ignore_errors=True)
        cache.notes.append(f"result cache: nothing stored and {cache.cache.clear()} entries removed, since the jobs "
                           f"ran without a sandbox and could have written its directory")
    elif not interrupted:
        by_id = {j.id: j for j in todo}
        for r in results:
            cache.store(r, by_id[r.job_id])
    for note in cache.notes:
        warn(f"gpu-gate: {note}")


def _not_run_on_unfit_runner(job: Any, problems: list[Any]) -> Any:
    """A job not started because the doctor found the runner unfit: not run, so it fails closed."""
    from ..findings import JobResult, Status

    return JobResult(job_id=job.id, check=job.check, status=Status.NOT_RUN, level=job.level,
                     spec=job.spec.id if job.spec else None, kernels=job.kernels,
                     reason=f"the runner failed its health check ({len(problems)} doctor finding(s)): its GPU is "
                            f"not trusted")


def _cache(policy: Any, repo: Path, args: argparse.Namespace, gpus: tuple[str, ...], *, home: Path | None = None,
           extra: dict[str, str] | None = None) -> Any:
    """The result cache of ``home`` (the repository), keyed by the files of ``repo`` (the tree the jobs
    run) and ``extra`` (the setup outputs taken into it)."""
    if args.no_cache or not policy.cache.enabled:
        return None
    from ..store.bridge import JobCache

    cache = JobCache(policy, repo, Path(args.cache_dir) if args.cache_dir else None, gpus, home=home,
                     extra=extra or {})
    if cache.refused:
        # Nothing is read from or written to a directory the commit carries: not the results, nor the
        # bytecode and the compiled kernels kept beside them (a link there points wherever it likes).
        for note in cache.notes:
            warn(f"gpu-gate: {note}")
        return None
    return cache


def local_rules(rules: Any, record: RunRecord) -> Any:
    """The policy's rules, where a local run without a GPU lists the GPU-only checks as not run
    here rather than failing on them (in CI they fail closed: see gpu_gate.checked)."""
    import dataclasses

    from ..checked import in_ci

    if in_ci() or record.environment.get("gpus"):
        return rules
    return dataclasses.replace(rules, gpu_not_run_here="warn")


def finish(record: RunRecord, loaded: LoadedPolicy, out_dir: Path, args: argparse.Namespace,
           roots: dict[str, str] | None = None) -> int:
    """The verdict and the reports of a run. ``roots``: this machine's directories that the record may
    name, and what each becomes in the reports (:mod:`gpu_gate.report.paths`; default: the working
    directory's, the runner's Python's, the temporary and home directories)."""
    from .json_output import check_json
    from ..report.console import gha_annotations, paint_headline, render_summary
    from ..report.paths import runner_roots, scrub_record
    from ..report.formats import OutputFormat, write_reports
    from ..coverage import revise
    from ..verdict import decide

    record = scrub_record(record, roots if roots is not None else runner_roots([Path.cwd()]))
    # What the specs launched in this run decides which changed kernels they covered.
    record.plan_findings = revise(record.kernels, record.plan_findings, record.results, loaded.policy.specs)
    if getattr(args, "github", None):
        _approvals(record)
    verdict = decide(record, local_rules(loaded.policy.rules(), record))
    for note in record.notes if out.verbose() else ():
        out.detail(f"note: {note}")
    if out.quiet():
        out.verdict(paint_headline(verdict.headline, out.colour()))
    else:
        out.verdict(render_summary(record, verdict, colour=out.colour(), full=out.verbose()))
    if _in_actions():
        for line in gha_annotations(record, verdict):
            out.verdict(line)  # workflow commands, not chatter: GitHub turns them into annotations
    code, written = int(verdict.exit_code), {}
    warnings: list[str] = []
    try:
        written = write_reports(record, verdict, out_dir, list(OutputFormat), warnings=warnings,
                                sarif_notes=loaded.policy.reports.sarif_notes)
        for w in warnings:
            out.error(f"gpu-gate: warning: {w}")
    except GateError as exc:
        # No report means no evidence: fail closed, whatever the verdict was.
        out.error(f"gpu-gate: error: {exc}")
        code = int(ExitCode.INTERNAL_ERROR)
    if written and code != ExitCode.INTERNAL_ERROR:
        say("reports: " + ", ".join(str(p) for p in written.values()))
        if getattr(args, "github", None):
            _publish(record, verdict, written, args)
    if getattr(args, "format", "text") == "json":
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
        warn(f"gpu-gate: warning: the approvals of the rule changes cannot be read ({exc}): no approval of the "
             f"rule changes is taken into account")
        return
    count = apply_approval(record, by, record.head or "")
    if count:
        say(f"{count} rule finding(s) approved for {str(record.head)[:12]} by {', '.join(by)} "
            f"(/gpu-gate approve-rules)")


def _publish(record: Any, verdict: Any, written: dict[str, Path], args: argparse.Namespace) -> None:
    from ..github.publish import publish
    from ..report.markdown import render_markdown

    outcome = publish(record, verdict, written, env=os.environ, comment_mode=args.comment_mode,
                      markdown=render_markdown(record, verdict), pr=args.pr, sha=args.sha)
    for m in outcome.messages:
        say(m)
