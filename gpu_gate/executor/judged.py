"""A job that runs code under review: the judge (gpu-gate's own process, outside the sandbox) and
its sandboxed workers, talking over socket pairs."""
from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import threading
import time
from pathlib import Path
from typing import TYPE_CHECKING
from ..store import compiled as compiled_store
from . import disguised, sandbox
from .. import proc
from ..judge.checks import CHECKS
from ..judge.checks.base import WrappingCheck
from ..judge.checks.outcome import BaseRun, WrapContext
from ..findings import Finding, JobResult, Severity
from ..protocol.jobs import Job
from ..protocol.jobs import base_commit, truth_commit
from ..protocol.roles import BASE, serves, worker_roles
from .argv import _context, _env_for, _niced, _worker_context, judge_argv, judge_env, worker_argv, worker_boot
from . import containment
from .containment import SANDBOX_STARTS, TOOL_START_LIMIT_S, Contained, _contained_run
from .control import RunControl, _kill_group
from .options import ExecOptions, concurrency
from .leftovers import judge_escapes
from .results import (_classify_failure, _error_result, _interrupted, _outcome_to_result, _read_result, _stuck_result,
                      _with_sandbox_ended, _with_sandbox_restarted, signal_cause)

if TYPE_CHECKING:
    import socket


_DIR = {"reference": "r", "base": "b"}  # the directories of the workers other than the head's, in the job's


KEPT = ".kept"  # in a worker's directory: where its sandbox shows the spec's kept kernels, read-only
TRUTH = ".truth"  # in the reference worker's directory: where its sandbox shows the base's tree, read-only


WORKER_GRACE_S = 5.0  # after the judge is done, how long a worker may take to exit before it is killed


def _waited_out(seconds: float, control: RunControl) -> bool:
    """Wait before a stuck sandbox's next start (see containment.RESTART_WAITS_S); True where the
    run was stopped meanwhile (its time limit, a cancelled gate)."""
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        if control.reason is not None:
            return True
        time.sleep(min(0.2, max(0.0, end - time.monotonic())))
    return control.reason is not None


def _run_judged(job: Job, opts: ExecOptions, gpu: str | None, workdir: Path, control: RunControl,
                avail: sandbox.Available) -> JobResult:
    """A job that runs code under review: the judge (gpu-gate's own process, outside the sandbox,
    which never imports that code) and its sandboxed workers (a check of a spec: the candidate and
    the reference; the compile check: the compiler; in a pull request, the base's too), each in a
    directory of its own, talking over socket pairs. The result file is the judge's, in a directory
    no worker sees; a worker's exit code and files decide nothing (compute-sanitizer's report
    aside, read from the candidate worker's directory by the sanitizer check)."""
    import socket

    marks = {"enter": time.monotonic()}  # the job's time outside the judge's process, for its timing
    outer = workdir.parent
    judge_dir = outer / "judge"
    # Differential runs: the base's code in a worker of its own, on the base's work tree.
    differential = bool(base_commit(job)) and opts.base_root is not None
    roles = worker_roles(job.check, differential)
    first = roles[0]  # the head's code: its worker's directory is the job's own, its output the log shown
    dirs = {role: workdir if role == first else outer / _DIR[role] for role in roles}
    roots = {role: opts.base_root if role == BASE and opts.base_root is not None else opts.repo_root for role in roles}
    # In a sandbox the base's tree is shown at the repository's own path: its code compiles to the
    # very kernels the head's unchanged code does, and its reports name the same files.
    remap = avail.protects_files
    shelf = compiled_store.shelf(opts.kernel_store, job) if opts.kernel_store is not None and remap else None
    lent: dict[str, tuple[tuple[Path, Path], ...]] = {}
    try:
        # entries the gate did not harvest itself never reach a worker (see compiled_store.verify)
        dropped = compiled_store.verify(shelf)
    except OSError:
        dropped, shelf = [], None  # a store that cannot be checked is not used
    contexts: dict[str, dict[str, object]] = {}
    wrapping = CHECKS[job.check].wrapping()  # compute-sanitizer runs the candidate's (and the base's) worker
    try:
        judge_dir.mkdir()
        for role, d in dirs.items():
            d.mkdir(exist_ok=True)
            shown = opts.repo_root if remap else roots[role]
            under_tool = wrapping is not None and role in ("candidate", "base")
            context_json = _worker_context(opts, gpu, shown, under_tool=under_tool)
            if role == "reference":
                lent[role] = _lend_truth(job, opts, d, remap, context_json)
            if shelf is not None and shelf.is_dir() and role != "reference":
                # the worker copies its spec's kept kernels into its own cache itself, while it
                # imports torch and the spec, from a read-only mount of the shelf in its own
                # directory: the shelf cannot be written from there, and the base's worker, whose
                # repository path shows the base's tree, sees it too (the reference's torch code
                # launches none of them)
                (d / KEPT).mkdir()
                context_json["shelf"] = str(d / KEPT)
                lent[role] = ((shelf, d / KEPT),)
            contexts[role] = {**context_json, "workdir": str(d)}  # handed over on stdin, not on disk
    except OSError as exc:
        return _error_result(job, "infrastructure", f"cannot write the job's files ({exc}): no disk space left?", None)
    marks["files"] = time.monotonic()
    threads = max(1, (os.cpu_count() or 2) // concurrency(opts))
    pairs = {role: socket.socketpair() for role in roles}
    context = {**_context(opts, gpu, job), "channels": {role: a.fileno() for role, (a, _) in pairs.items()}}
    if differential:
        context["base_root"] = str(opts.base_root)  # the judge reads the base's kernel files (the compile check)
    if job.check == "equivalence" and job.options.get("disguised_replay", True):
        try:  # the disguised replay's programs: the judge starts them when it has chosen their cases
            context["disguised"] = {role: disguised.launch(opts, gpu, outer, avail, job.check, threads, role)
                                    for role in roles if role in disguised.DIR}
        except (OSError, ValueError) as exc:
            context["disguised_error"] = f"cannot prepare the disguised replay's directory ({exc})"
    marks["disguised"] = time.monotonic()
    job_file, result_file = judge_dir / "in.json", judge_dir / "out.json"
    try:
        job_file.write_text(json.dumps({"job": job.to_json(), "context": context}))
    except OSError as exc:
        for a, b in pairs.values():
            a.close()
            b.close()
        return _error_result(job, "infrastructure", f"cannot write the job's files ({exc}): no disk space left?", None)
    env = _env_for(opts, gpu, workdir, threads, job.check, avail)
    jenv = judge_env(env, judge_dir)
    argvs = {role: worker_argv(opts, dirs[role] / "context.json", role=serves(job.check, role), fd=b.fileno())
             for role, (_, b) in pairs.items()}
    boots = {role: worker_boot(b.fileno(), serves(job.check, role), contexts[role]) for role, (_, b) in pairs.items()}
    # compute-sanitizer runs the candidate's worker's sandbox as its program (from outside a bwrap
    # sandbox); in a differential run the base's too, so that each report can be told new from
    # pre-existing.
    tools: dict[str, list[str]] = {}
    for role in ("candidate", "base"):
        if wrapping is None or role not in dirs:
            continue
        wctx = WrapContext(opts.repo_root if remap else roots[role], gpu is not None, opts.sanitizer_path,
                           opts.timeout_s, env, avail.tool_outside)
        wrapped = wrapping.wrap(job, dirs[role], wctx)
        if not isinstance(wrapped, list):  # an Outcome: the tool cannot run
            if role != "candidate":
                continue  # the base's reports cannot be compared: the head's are judged as they are
            _close_pairs(pairs)
            return _outcome_to_result(job, wrapped, 0.0, None)  # fail closed
        tools[role] = wrapped
    timeout = max(1.0, min(opts.timeout_s, opts.run_deadline - time.monotonic()))
    began = time.monotonic()
    marks["prepared"] = began
    done: dict[str, Contained] = {}
    pids: dict[str, int] = {}

    restarts: dict[str, int] = {}
    released: set[str] = set()
    release_lock = threading.Lock()

    def release(role: str) -> None:
        # The gate's copy of the worker's end of the socket is closed once the sandbox has started
        # the worker (the judge then sees the end when the worker ends); until then it is kept, for
        # a sandbox that never starts to be started again on the same socket.
        with release_lock:
            if role not in released:
                released.add(role)
                pairs[role][1].close()

    def worker(role: str) -> None:
        # Each worker's caches (Triton's, CuPy's, the driver's) and temporary files in its own
        # directory: the only one its sandbox can write. The candidate's may carry the sanitizer's.
        wenv = env if role == first else _env_for(opts, gpu, dirs[role], threads, job.check, avail)
        b = pairs[role][1]
        # The judge keeps the time: a worker outlives it only until it is killed after the judge.
        def started(p: int) -> None:
            pids[role] = p
            marks.setdefault(f"spawned_{role}", time.monotonic())

        other = roots[role] != opts.repo_root
        wopts = opts if remap or not other else dataclasses.replace(opts, repo_root=roots[role])
        try:
            for start in range(1, SANDBOX_STARTS + 1):
                c = _contained_run(argvs[role], wopts, gpu, dirs[role], wenv, timeout + 60, avail, control,
                                   extra_fds=(b.fileno(),), on_start=started,
                                   source=roots[role] if remap and other else None, lent=lent.get(role, ()),
                                   tool=tools.get(role, ()), stdin=boots[role], on_running=lambda: release(role))
                done[role] = c
                waits = containment.RESTART_WAITS_S
                wait = waits[min(start, len(waits)) - 1]
                if not c.stuck or start == SANDBOX_STARTS or control.reason is not None \
                        or time.monotonic() + wait > began + timeout - TOOL_START_LIMIT_S:
                    break
                restarts[role] = start  # the sandbox never started the worker: nothing ran, start it again
                _forget_report(tools.get(role, ()))
                if _waited_out(wait, control):
                    break
        finally:
            release(role)

    running = [threading.Thread(target=worker, args=(role,), daemon=True) for role in roles]
    for t in running:
        t.start()
    judge_pid: list[int] = []

    def judge_started(p: int) -> None:
        marks["judge"] = time.monotonic()
        judge_pid.append(p)
        control.started(p)
        _wait_started(pids, len(roles))  # each worker's end is closed here once its sandbox started it

    try:
        jpr = proc.run(_niced(judge_argv(opts, job_file, result_file), opts), cwd=judge_dir, env=jenv,
                       timeout=timeout,
                       pass_fds=tuple(a.fileno() for a, _ in pairs.values()), on_start=judge_started)
    finally:
        marks["judged"] = time.monotonic()
        control.ended(judge_pid[0] if judge_pid else None)
        _close_pairs(pairs)
        for t in running:
            t.join(WORKER_GRACE_S)
        for p in pids.values():
            _kill_group(p)
        for t in running:
            t.join()
        marks["workers_gone"] = time.monotonic()
    if shelf is not None and "base" in dirs and control.reason is None and opts.worker_python is None:
        # every sandbox is gone: what the base's code compiled is kept for the next runs (never from
        # a run whose workers used an environment the pull request's setup built)
        compiled_store.harvest(dirs["base"] / ".cache" / "triton", shelf)
    marks["kept"] = time.monotonic()
    if control.reason is not None and (jpr.signal == 9 or jpr.timed_out or jpr.returncode is None):
        return _interrupted(job, control.reason, jpr)
    stuck = sorted(role for role, c in done.items() if c.stuck)
    if stuck:
        return _stuck_result(job, stuck, done[stuck[0]].pr, restarts)
    cand_pr = done[first][0] if first in done else jpr
    escaped = sum(c.escaped for c in done.values())
    unwatched = any(c.unwatched for c in done.values())
    ended = {role: c.ended for role, c in done.items() if c.ended}
    inner = _read_result(result_file)
    base_run = None
    if "base" in tools and "base" in done:
        base_run = BaseRun(dirs["base"], done["base"][0], roots["base"])
    result = _judge_result(job, opts, workdir, jpr, cand_pr, inner, timeout, wrapping, base_run)
    _time_outside(result, marks, {role: c.started_s for role, c in done.items() if c.started_s is not None})
    if dropped:
        result.findings.append(store_note(dropped))
    if ended:
        result = _with_sandbox_ended(result, ended)
    if restarts:
        result = _with_sandbox_restarted(result, restarts)
    if not (escaped or unwatched):
        return result
    how = ("they were killed with the sandbox's PID namespace" if avail.works
           else "they were found re-parented to the worker's reaper and killed")
    return judge_escapes(result, {role: c.escaped for role, c in done.items() if c.escaped},
                         {role: c.left for role, c in done.items()}, [workdir, *dirs.values()],
                         "base" in done, unwatched, how, head=first)


def _lend_truth(job: Job, opts: ExecOptions, d: Path, remap: bool, context: dict[str, object]
                ) -> tuple[tuple[Path, Path], ...]:
    """Where the reference worker finds the tree its truth comes from (see
    :func:`gpu_gate.protocol.jobs.truth_commit`): in a sandbox, the base's work tree shown read-only
    in the worker's own directory (the repository's path shows the head's, for the head's spec);
    without one, that work tree itself. Written into the worker's ``context``; the mounts returned."""
    commit = truth_commit(job)
    if commit is None:
        return ()
    tree = dict(opts.truth_roots).get(commit)
    if tree is None:
        context["truth_missing"] = f"the base's tree at {commit[:12]} was not checked out"
        return ()
    if not remap:
        context["truth_root"] = str(tree)
        return ()
    (d / TRUTH).mkdir()
    context["truth_root"] = str(d / TRUTH)
    return ((tree, d / TRUTH),)


def store_note(dropped: list[str]) -> Finding:
    """A note: compiled-kernel store entries dropped because their digest was not the gate's."""
    shown = ", ".join(dropped[:3]) + (f" and {len(dropped) - 3} more" if len(dropped) > 3 else "")
    return Finding(check="gate", kind="store-entry-dropped", severity=Severity.NOTE,
                   message=f"compiled-kernel store: {len(dropped)} entr{'y' if len(dropped) == 1 else 'ies'} "
                           f"not harvested by the gate (no digest, or a digest that does not match) dropped "
                           f"before any worker saw them: {shown}",
                   details={"dropped": dropped})


def _time_outside(result: JobResult, marks: dict[str, float], sandbox_start: dict[str, float]) -> None:
    """Where a judged job's time went outside the judge's process (``extra.timing.outside``):
    its files, sandboxes and processes started (``start_s``, of which writing the job's files,
    ``files_s``), the workers' exit after the judge's
    (``workers_exit_s``), the base's compiled kernels kept (``keep_s``); under a tool outside the
    sandbox, how long each sandbox took to start its worker (``sandbox_start_s``, by role: what
    :data:`TOOL_START_LIMIT_S` is measured against)."""
    if "judge" not in marks:
        return
    if result.extra.timing is None:
        result.extra.timing = {}
    outside: dict[str, object] = {"files_s": round(marks["files"] - marks["enter"], 2),
                               "start_s": round(marks["judge"] - marks["enter"], 2),
                               # of start_s: the disguised replay's programs prepared, then the judge's
                               # and workers' command lines and tools, then each process spawned
                               "disguised_s": round(marks["disguised"] - marks["files"], 2),
                               "prepared_s": round(marks["prepared"] - marks["disguised"], 2),
                               "judge_spawn_s": round(marks["judge"] - marks["prepared"], 2),
                               **{f"{k.removeprefix('spawned_')}_spawn_s": round(v - marks["prepared"], 2)
                                  for k, v in marks.items() if k.startswith("spawned_")},
                               "workers_exit_s": round(marks["workers_gone"] - marks["judged"], 2),
                               "keep_s": round(marks["kept"] - marks["workers_gone"], 2)}
    if sandbox_start:
        outside["sandbox_start_s"] = sandbox_start
    rss = _gate_rss_mb()
    if rss is not None:  # what each spawn (a fork of the gate's process) has to copy the page tables of
        outside["gate_rss_mb"] = rss
    result.extra.timing["outside"] = outside


def _gate_rss_mb() -> int | None:
    """The gate's resident memory (MiB), from /proc; None where it cannot be read."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) // 1024
    except (OSError, ValueError, IndexError):
        return None
    return None


def _forget_report(tool: list[str] | tuple[str, ...]) -> None:
    """Before a stuck sandbox is started again: the report the ended tool saved is removed, so that
    only the run that checked something can be read."""
    if "--save" in tool:
        with contextlib.suppress(OSError, IndexError):
            Path(tool[list(tool).index("--save") + 1]).unlink()


def _wait_started(pids: dict[str, int], n: int, limit_s: float = 30.0) -> None:
    end = time.monotonic() + limit_s
    while len(pids) < n and time.monotonic() < end:
        time.sleep(0.005)


def _close_pairs(pairs: dict[str, tuple[socket.socket, socket.socket]]) -> None:
    for a, b in pairs.values():
        for s in (a, b):
            try:
                s.close()
            except OSError:
                pass


def _judge_result(job: Job, opts: ExecOptions, workdir: Path, jpr: proc.ProcResult, cand: proc.ProcResult,
                  inner: JobResult | None, timeout: float, wrapping: WrappingCheck | None,
                  base: BaseRun | None = None) -> JobResult:
    """The judge's result; a sanitizer check adds what compute-sanitizer saw in the candidate's
    worker (and, in a differential run, in the base's). The candidate's own output (its prints, its
    traceback) is the log shown."""
    if wrapping is not None:
        from ..judge.job import Outcome

        inner_outcome = None
        if inner is not None:
            inner_outcome = Outcome(inner.status, inner.findings, inner.cases, inner.reason, inner.extra)
        outcome = wrapping.collect(job, workdir, cand, inner_outcome, base)
        return _outcome_to_result(job, outcome, jpr.duration_s, cand.tail(40) or jpr.tail(40) or None)
    if inner is None:
        kind, message = _classify_failure(job, jpr, timeout)
        if jpr.timed_out and timeout < opts.timeout_s:
            message += " (the whole run's time limit cut this job short)"
        res = _error_result(job, kind, message, jpr)
        return dataclasses.replace(res, log_tail=cand.tail(40) or res.log_tail)
    inner.duration_s = jpr.duration_s
    if cand.signal or cand.returncode not in (0, None):  # how the candidate died is the executor's to say
        # The signal, not the sandbox's command line (the log tail keeps what the process printed).
        how = (f"killed by {cand.signal_name}{signal_cause(cand)}" if cand.signal
               else f"it exited with code {cand.returncode}")
        inner.findings = [dataclasses.replace(f, message=f"{f.message}; {how}") if f.kind == "crash" else f
                          for f in inner.findings]
    if cand.tail(5) or jpr.tail(5):
        inner.log_tail = "\n".join(t for t in (cand.tail(40), jpr.tail(10)) if t)
    return dataclasses.replace(inner, job_id=job.id, check=job.check, level=job.level,
                               spec=job.spec.id if job.spec else None, kernels=job.kernels)
