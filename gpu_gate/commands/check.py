"""``gpu-gate check``, the pipeline: plan → result cache → doctor → execute → verdict → reports.

It stays on the gate's side of the trust boundary: jobs run through :mod:`gpu_gate.executor` (a
judge and its sandboxed workers each), and everything here reads their results as data.
"""
from __future__ import annotations

import contextlib
import dataclasses
import os
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from ..store import bytecode
from . import output as out
from ..errors import GateError
from .planning import cache_dir as cache_dir_in_use, in_actions, make_plan, policy_in_force, repo_root, say_head
from .report import finish
from .trees import base_checkout, head_checkout, truth_checkout
from .request import CacheChoice, PlanRequest, ReportOutput
from .vet import DoctorBeside, vet_runner

if TYPE_CHECKING:
    from ..executor.sandbox import Available
    from ..findings import Finding, JobResult
    from ..plan import Plan
    from ..protocol.jobs import Job
    from ..store.results import JobCache
    from .head_tree import HeadTree
    from ..policy import LoadedPolicy, Policy
    from ..record import RunRecord


@dataclasses.dataclass(frozen=True)
class CheckRequest:
    plan: PlanRequest
    output: ReportOutput
    plan_file: Path | None = None  # run the jobs of this plan file instead of planning again
    shard: str | None = None  # I/N: only this shard of the plan's jobs
    jobs: int | None = None  # jobs at once without a GPU
    job_timeout: float | None = None  # seconds; None: the policy's
    cpu: bool = False  # ignore any GPU
    full: bool = False  # every case on the policy's budgets outside CI too (see local_loop)
    keep_job_dirs: bool = False
    work_dir: str | None = None  # where job directories are made
    worker_python: str | None = None  # the workers' interpreter, as given (checked by :func:`worker_python`)


def say(msg: str = "") -> None:
    out.say(msg)


def warn(msg: str) -> None:
    out.warn(msg)


def run(request: CheckRequest) -> int:
    """Plan (or read the plan file), then :func:`check`."""
    worker = worker_python(request.worker_python)
    if request.plan_file and (request.plan.only or request.plan.every_spec):
        raise GateError("--spec and --all choose what to plan; a plan file is already chosen",
                        hint="pass them to `gpu-gate plan`, or drop --plan")
    if request.plan_file:
        from ..plan import Plan

        repo = repo_root(request.plan.repo)
        plan = Plan.read(request.plan_file)
        loaded = policy_in_force(repo, request.plan.policy, plan.base, plan.head, plan.rules).loaded
    else:
        planned = make_plan(request.plan)
        repo, loaded, plan = planned.repo, planned.loaded, planned.plan
    say(loaded.banner)
    say_head(plan, request.plan.staged)
    _require_extras(plan, worker)
    return check(repo, loaded, plan, request, worker)


def _require_extras(plan: Plan, worker_python: Path | None) -> None:
    """torch for the judge of any spec's job, Triton for the workers of Triton kernels: a missing one is
    one line that names the extra to install, before any job starts."""
    from ..extras import require

    if any(j.spec is not None for j in plan.jobs):
        require(["torch"], "gpu-gate check")
    if any("triton" in k.language.split("+") for k in plan.kernels):
        require(["triton"], "gpu-gate check", str(worker_python) if worker_python else None)


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


def check(repo: Path, loaded: LoadedPolicy, plan: Plan, request: CheckRequest, worker: Path | None = None) -> int:
    """The whole run of ``gpu-gate check`` once the plan is made: the jobs (from the result cache, or
    run after the doctor has vetted the runner), the verdict, the reports. Returns the exit code.
    ``worker``: the workers' interpreter (None: gpu-gate's own)."""
    from ..executor.slots import detect_gpus
    from ..plan import parse_shard, shard
    from ..record import RunRecord
    from ..report.outdir import tracked_findings
    from ..report.paths import runner_roots

    all_ids = [j.id for j in plan.jobs]
    jobs = plan.jobs
    if request.shard:
        i, n = parse_shard(request.shard)
        jobs = shard(jobs, i, n)
    policy = loaded.policy
    gpus = detect_gpus() if not request.cpu else ()
    if isinstance(policy.runner.gpus, int):
        gpus = gpus[: policy.runner.gpus]
    from ..checked import in_ci
    from ..local_loop import adapt

    jobs, local_notes = adapt(jobs, gpu=bool(gpus), ci=in_ci() or request.full)
    record = RunRecord(base=plan.base, head=plan.head, rules=plan.rules, policy_source=loaded.source,
                       kernels=plan.kernels,
                       plan_findings=list(plan.findings), planned_jobs=[j.id for j in jobs] if request.shard else all_ids,
                       shard=request.shard, environment=_environment(gpus), notes=list(plan.notes),
                       selected={sid: why for sid, why in plan.selected.items()
                                 if any(j.spec is not None and j.spec.id == sid for j in jobs)})
    record.changed_lines = {sid: lines for sid, lines in plan.changed_lines.items() if sid in record.selected}
    cache_dir = cache_dir_in_use(policy, repo, request.plan.cache)
    record.plan_findings += tracked_findings(repo, [Path(request.output.out), *([cache_dir] if cache_dir else [])],
                                             plan.head)
    if not gpus:
        record.notes.append("no GPU on this machine: GPU-only checks are reported as not run")
    record.notes += local_notes
    roots = runner_roots([repo])
    if not jobs:
        quiet = not plan.kernels and not plan.selected and not plan.findings
        say("no kernel changes" if quiet else "no jobs to run")
    else:
        for sid, why in sorted(record.selected.items()):
            say(f"spec {sid}: {'; '.join(why)}")
        for note in local_notes:
            say(note)
        start = time.monotonic()
        with head_checkout(repo, plan.head, policy, request) as head, \
                base_checkout(repo, plan.base, jobs, record) as base_tree, \
                truth_checkout(repo, jobs, plan.base, base_tree, record) as truth:
            record.notes += head.notes()
            ready = {"trees": time.monotonic() - start}
            record.results = _run_jobs(jobs, head.path, policy, gpus, request, worker, record, base_tree, ready,
                                       home=repo, head=head, truth=truth)
            record.places = _places(record, head.path)
            # the work trees' paths, while they exist (a truth tree is the repository's too)
            roots = runner_roots([repo, head.path, *truth.values()], base_tree)
        _remember_launches(plan, record, cache_dir, trusted=plan.head is not None and plan.head == plan.base
                           and worker is None)
    return finish(record, loaded, request.output, roots)


def _places(record: RunRecord, tree: Path) -> dict[str, list[dict[str, object]]]:
    """Where each spec job's findings with no line go, read from the head's own files now: the
    reports may be published later from a checkout of another commit."""
    from ..report import locate

    out: dict[str, list[dict[str, object]]] = {}
    seen: dict[tuple[str, tuple[str, ...]], list[dict[str, object]]] = {}  # a spec's jobs share their places
    for r in record.results:
        if r.spec:
            key = (r.spec, tuple(r.kernels))
            if key not in seen:
                seen[key] = locate.recorded(locate.places(tree, r.spec, r.kernels, record.changed_lines.get(r.spec)))
            if seen[key]:
                out[r.job_id] = seen[key]
    return out


def _shared_gpu_nodes(gpus: Sequence[str], box: Available) -> list[str]:
    """A note for each GPU whose jobs' sandbox holds every GPU's device node (see gpu_nodes): on a
    runner with several GPUs, a job there could reach the GPUs other jobs are judged on."""
    from ..executor.argv import job_gpu

    notes = []
    for g in gpus:
        own = job_gpu(g, box)
        if own is not None and own.whole is not None:
            notes.append(f"sandbox: the jobs on GPU {g} hold every GPU's device node: {own.whole}")
    return notes


def _view_note(box: object) -> list[str]:
    """A note where the runner switched the sandbox's minimal view off: its workers could read the
    whole machine (read-only), and a reader of the report should know."""
    from ..executor.view import SWITCH, minimal

    if getattr(box, "kind", None) != "bwrap" or minimal():
        return []
    return [f"sandbox: the minimal view is switched off on this runner ({SWITCH}=0): the workers see the whole "
            "filesystem read-only, with the report, cache and secrets' places hidden (docs/trust.md)"]


def _environment(gpus: tuple[str, ...]) -> dict[str, object]:
    import platform

    from .. import __version__

    return {"gpu_gate": __version__, "python": platform.python_version(), "gpus": list(gpus),
            "device": "cuda" if gpus else "cpu"}


def _remember_launches(plan: Plan, record: RunRecord, cache_dir: Path | None, trusted: bool = False) -> None:
    """Keep what each spec launched, keyed by the content it ran on, for later plans. ``trusted``: the
    run judged the base's own commit (head is base) with gpu-gate's own interpreter, so the workers
    that said what they launched ran only the base's code: such a record may also spare a spec a
    run (see gpu_gate.coverage.narrow); any other only predicts coverage."""
    from ..coverage import LaunchStore

    if cache_dir is None:
        return
    store = LaunchStore(cache_dir)
    device = str(record.environment.get("device") or "cpu")
    for r in record.results:
        key = plan.launch_keys.get(r.spec or "")
        if key and r.extra.launches is not None:
            store.put(key, r.spec or "", device, r.extra.launches, trusted=trusted)


def _run_jobs(jobs: list[Job], repo: Path, policy: Policy, gpus: tuple[str, ...], request: CheckRequest,
              worker_python: Path | None, record: RunRecord, base_tree: Path | None = None,
              ready: dict[str, float] | None = None, *, home: Path | None = None, head: HeadTree | None = None,
              truth: dict[str, Path] | None = None) -> list[JobResult]:
    """``repo``: the tree the jobs run (an export of the head commit, or the work tree); ``home``: the
    repository itself (where the result cache lives), by default ``repo``; ``head``: how ``repo`` was
    made (its setup outputs are part of the cache's key); ``truth``: the trees the references load
    from, by commit. ``ready``: how long each step before the first job took (the work trees, so
    far): the run says where the time before its first job went."""
    home = home or repo
    from ..executor import sandbox
    from ..executor.options import ExecOptions
    from ..executor.control import RunControl, cancel_on_signals, interrupted_finding
    from ..executor.reservations import gate_on_runner
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
    cache = _cache(policy, repo, request.plan.cache, gpus, home=home,
                   extra=head.fingerprint() if head is not None else None)
    todo, cached = [], []
    for j in jobs:
        hit = cache.lookup(j) if cache else None
        (cached.append(hit) if hit is not None else todo.append(j))
    step("result cache")
    start, end = gha_group(f"gpu-gate: {len(jobs)} jobs") if in_actions() else ("", "")
    if start:
        say(start)
    colour = out.colour()
    work_root = Path(request.work_dir) if request.work_dir else None
    # Shared bytecode only for jobs that run: filling it imports torch (seconds), which a run served
    # from the cache does not wait for. It starts from what earlier runs kept (gpu_gate.store.bytecode),
    # where the sandbox keeps jobs from writing to it and the workers run the gate's interpreter.
    store = bytecode.store_dir(cache.cache.dir) if cache and box.protects_files and not worker_python else None
    # Listed as a gate running on this runner while its jobs may hold the GPU: another gate's doctor
    # then counts them as a gate's jobs sharing the GPU by reservation, not as a stranger's processes.
    listed = gate_on_runner() if gpus and todo else contextlib.nullcontext()
    with (shared_bytecode(work_root, store) if todo else contextlib.nullcontext(None)) as pycache, listed:
        # The doctor runs only when jobs are about to use the GPU (a run served from the cache does
        # not wait for it); its torch probe compiles the bytecode the jobs then share.
        step("bytecode")
        unfit: list[Finding] = []
        beside: DoctorBeside | None = None
        if gpus and todo:
            if len(gpus) == 1:
                # The GPU's own health before any job; the tools' probes beside the first jobs
                beside = DoctorBeside(gpus, pycache, policy, todo, control)
                vetted = beside.now
            else:  # several GPUs: which of them run jobs is known before any starts
                vetted = vet_runner(gpus, pycache, policy, todo)
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

        def progress(r: JobResult, done: int, total: int, elapsed: float) -> None:
            keeper.take(r)  # the modules its worker imported without bytecode, compiled beside the other jobs
            _progress(progress_line(r, done + offset, total + offset, elapsed, colour, said), r)

        if unfit:
            results = [_not_run_on_unfit_runner(j, unfit) for j in todo]
            for i, r in enumerate(results, 1):
                progress(r, i, len(results), 0.0)
        else:
            record.notes += _shared_gpu_nodes(gpus, box) + _view_note(box)
            opts = ExecOptions(repo_root=repo, gpus=gpus,
                               timeout_s=request.job_timeout or policy.runner.job_timeout_minutes * 60,
                               run_deadline=time.monotonic() + policy.runner.run_timeout_minutes * 60,
                               workers=request.jobs or (len(gpus) or min(2, os.cpu_count() or 1)),
                               fail_fast=policy.runner.fail_fast, sanitizer_path=policy.cuda.sanitizer,
                               jobs_per_gpu=policy.runner.jobs_per_gpu, infrastructure=policy.runner.infrastructure,
                               keep_workdirs=request.output.out / "jobs" if request.keep_job_dirs else None,
                               work_root=work_root, pycache=pycache, sandbox_mode=policy.runner.sandbox,
                               sandbox=box, hide=(request.output.out.resolve(), *([cache.cache.dir] if cache else []),
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
    if control.reason and control.reason != DoctorBeside.REASON:
        record.plan_findings.append(interrupted_finding(control.reason))
    if cache:
        # Unsandboxed jobs ran (none runs on an unfit runner, or under `required` without a sandbox).
        exposed = not box.protects_files and not unfit and policy.runner.sandbox != "required"
        _settle_cache(cache, todo, results, not exposed, control.reason)
    if end:
        say(end)
    return cached + results


def _work_tree_hidden(home: Path, head: HeadTree | None) -> list[Path]:
    """Where the jobs run an export of the head commit, the work tree is out of their sight too: what
    a build step left there (an editable install points into it) is the jobs' only through the
    policy's ``setup_outputs``, copied into the export. The interpreters and gpu-gate stay shown
    where they live inside it (see executor.argv._layout)."""
    return [home.resolve()] if head is not None and head.exported else []


def _progress(line: str, result: JobResult) -> None:
    from ..report.console import job_details

    say(line)
    for detail in job_details(result) if out.verbose() else ():
        out.detail(detail)


def _settle_cache(cache: JobCache, todo: list[Job], results: list[JobResult], protected: bool,
                 interrupted: str | None) -> None:
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


def _not_run_on_unfit_runner(job: Job, problems: list[Finding]) -> JobResult:
    """A job not started because the doctor found the runner unfit: not run, so it fails closed."""
    from ..findings import JobResult, Status

    return JobResult(job_id=job.id, check=job.check, status=Status.NOT_RUN, level=job.level,
                     spec=job.spec.id if job.spec else None, kernels=job.kernels,
                     reason=f"the runner failed its health check ({len(problems)} doctor finding(s)): its GPU is "
                            f"not trusted")


def _cache(policy: Policy, repo: Path, choice: CacheChoice, gpus: tuple[str, ...], *, home: Path | None = None,
           extra: dict[str, str] | None = None) -> JobCache | None:
    """The result cache of ``home`` (the repository), keyed by the files of ``repo`` (the tree the jobs
    run) and ``extra`` (the setup outputs taken into it)."""
    if not choice.enabled or not policy.cache.enabled:
        return None
    from ..store.results import JobCache

    cache = JobCache(policy, repo, Path(choice.dir) if choice.dir else None, gpus, home=home, extra=extra or {})
    if cache.refused:
        # Nothing is read from or written to a directory the commit carries: not the results, nor the
        # bytecode and the compiled kernels kept beside them (a link there points wherever it likes).
        for note in cache.notes:
            warn(f"gpu-gate: {note}")
        return None
    return cache


