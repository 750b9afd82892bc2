"""Compiling ahead: the Triton kernels a job's cases will launch, compiled on several cores before
the cases reach them.

A real kernel compiles a new specialization for nearly every size class, dtype and layout the
cases reach (on an H100, 11 of the 28 s of Liger-Kernel's GEGLU equivalence job), one after the
other, in the one process that runs the cases. Once the judge has the job's schedule, it sends the
cases' tokens to the worker (``ahead``). A process of the worker's own runs beside it, in the same
sandbox, with the same environment (started with the worker, for an equivalence job, so that its
imports overlap the worker's; else when asked); given the cases, it:

- imports the spec as the worker did, and builds each case's inputs as the judge will
  (``equivalence.inputs.materialize``, same seed);
- calls the candidate, forward and backward, with every Triton launch turned into a *warmup*:
  Triton resolves the specialization and compiles it, on a pool of threads
  (``triton.runtime._async_compile.AsyncCompileMode``), and launches nothing;
- writes what it compiled into the worker's own Triton cache directory, where the worker finds it
  when its case gets there (Triton's cache is keyed by content: the same key is the same binary,
  whoever compiled it);
- in the head's worker, once the dry runs are done: compiles the specializations they launched for
  the compile check's architectures, with their resources (``specializations.build_ahead``), and
  leaves them in a file the worker's ``finish`` reads, where it would otherwise compile them all
  itself after the last case (on an H100, 3.5 s at the end of the Liger GEGLU job).

It decides nothing. Its outputs are never computed (no kernel runs), and the worker's calls run as
before, compiling themselves whatever is not there yet. What reaches the judge is what the worker
reports anyway: the launched specializations' resources, as facts of the code under test (a build
made here is one the worker would have made, for the same launch and architecture). It
runs the same code as the worker it serves, in the same sandbox and trust: the head's beside the
head's worker, the base's beside the base's (whose cache is the one kept for later runs, see
``compiled_store``). What it cannot do it skips: an autotuned kernel (the worker's own runs pick its
configs), a wrapper that needs values a kernel would have computed (they are whatever memory
held), a Triton without asynchronous compiling. The worker ends it before it exits itself, so it
never outlives the job.
"""
from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypedDict

from .. import procstat
from ..protocol.jobs import Job

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator, Mapping
    from types import FrameType

    import torch

    from ..protocol.cases import Case
    from ..spec import Spec
    from .specializations import Built
    from .tritonlaunch import Launch, Recorder

    class Started(TypedDict, total=False):
        """:meth:`Ahead.start`'s answer: started (``ok``), or why not (``skipped``)."""
        ok: bool
        skipped: str

LAUNCHED_WAIT_S = 20.0  # the worker's finish waits this long, at most, for the sibling's builds
BUDGET_S = 120.0  # the dry runs stop starting cases after this (the compiles they started finish)
CASE_LIMIT_S = 10.0  # one dry run's wrapper code, at most (an alarm ends a hang)
MAX_CASE_BYTES = 1 << 30  # larger cases' inputs are not built here (the worker needs the memory)


def _compiles(device: str) -> bool:
    """Triton compiles kernels here: a GPU, not the interpreter."""
    return device == "cuda" and os.environ.get("TRITON_INTERPRET") != "1"


def wanted(device: str) -> str | None:
    """Why compiling ahead does not apply in this worker (None: it does)."""
    if not _compiles(device):
        return "no GPU: nothing is compiled" if device != "cuda" else "Triton's interpreter compiles nothing"
    if "triton" not in sys.modules:
        return "the code under test does not use Triton"
    try:
        from triton.runtime import _async_compile  # noqa: F401
    except ImportError:
        return "this Triton cannot compile asynchronously"
    return None


class Ahead:
    """The worker's side: starts the process, and ends it."""

    def __init__(self) -> None:
        self.proc: subprocess.Popen[bytes] | None = None
        self.dir: Path | None = None
        self.sent = False  # the cases were given to it

    def early(self, job: Job, repo_root: Path, workdir: Path, device: str, *, builds: bool = False) -> bool:
        """At the worker's start, for a job that will ask (equivalence, not under a tool): start the
        sibling now, so that it imports torch and the spec while the worker does; it then waits for
        the cases (``start``). ``builds``: it also compiles the launched specializations for the
        compile check (the head's worker). Whether it was started."""
        if job.check != "equivalence" or job.options.get("sanitizer") or not _compiles(device) \
                or self.proc is not None or job.case:
            return False
        self._spawn(job, repo_root, workdir, builds)
        return True

    def start(self, job: Job, tokens: list[str], repo_root: Path, workdir: Path, device: str,
              threads: int, *, builds: bool = False) -> Started:
        """Compile ``tokens``' kernels: in the sibling started early, or in one started now."""
        why = wanted(device)
        if why is not None:
            self._close_input()  # a sibling started early exits at the end of its input
            return {"skipped": why}
        if self.proc is None:
            self._spawn(job, repo_root, workdir, builds)
        if self.sent:
            return {"skipped": "already compiling ahead"}
        assert self.proc is not None and self.proc.stdin is not None
        try:
            self.proc.stdin.write(json.dumps({"cases": tokens, "threads": threads}).encode() + b"\n")
            self.proc.stdin.close()
        except OSError:  # it is gone (a spec that did not import there, say): the worker compiles as before
            return {"skipped": "the compiling process ended before it was given the cases"}
        self.sent = True
        return {"ok": True}

    def _spawn(self, job: Job, repo_root: Path, workdir: Path, builds: bool) -> None:
        d = workdir / "ahead"
        d.mkdir(parents=True, exist_ok=True)  # an in-process run may not have made its workdir yet
        (d / "ahead.json").write_text(json.dumps({"job": job.to_json(), "repo_root": str(repo_root),
                                                  "builds": builds}))
        argv = [sys.executable, *_interpreter_flags(), "-c", boot(), str(d / "ahead.json")]
        with open(d / "log.txt", "wb") as log:
            # a process group of its own: Triton's compile threads run ptxas as its children, and
            # ``stop`` ends them with it (killed alone, it left them to the sandbox's init, an
            # ``escaped-process`` that the gate's own compiling made)
            self.proc = subprocess.Popen(argv, cwd=d, stdin=subprocess.PIPE, stdout=log, stderr=log,
                                         env=dict(os.environ), process_group=0)
        self.dir = d

    def _close_input(self) -> None:
        if self.proc is not None and self.proc.stdin is not None and not self.proc.stdin.closed:
            with contextlib.suppress(OSError):
                self.proc.stdin.close()

    def builds(self, wait_s: float = LAUNCHED_WAIT_S) -> Built:
        """The launched specializations the sibling compiled for the compile check (see
        ``specializations.build_ahead``); waits up to ``wait_s`` where it is still compiling them,
        none where it never got there (the worker compiles them itself)."""
        from .specializations import builds_from_json

        if self.proc is None or self.dir is None:
            return {}
        # built beside the dry runs, or after them: wait for the file, not for the process's end
        deadline = time.monotonic() + wait_s
        while self.proc.poll() is None and (self.dir / "building").exists() and \
                not (self.dir / "launched.json").exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        try:
            return builds_from_json(json.loads((self.dir / "launched.json").read_text()))
        except (OSError, ValueError):
            return {}

    def stop(self) -> dict[str, float | int | bool]:
        """End the process (if it is still compiling) and say what it did."""
        if self.proc is None or self.dir is None:
            return {}
        self._close_input()
        group = self.proc.pid
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(group, signal.SIGKILL)  # the sibling and the compilers it was running
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.proc.wait(5)
        _wait_group_gone(group, 5.0)
        self.proc = None
        try:
            done = json.loads((self.dir / "done.json").read_text())
        except (OSError, ValueError):
            return {"finished": False}
        return {"finished": True, **{k: v for k, v in done.items() if isinstance(v, (int, float))}}


def _wait_group_gone(group: int, wait_s: float) -> None:
    """Wait until no live process is left in process group ``group`` (a killed process may take a moment
    to die; a zombie waiting for its reaper counts as gone)."""
    deadline = time.monotonic() + wait_s
    while time.monotonic() < deadline:
        left = any(s is not None and s.pgrp == group and s.state not in ("Z", "X")
                   for s in map(procstat.stat, procstat.pids()))
        if not left:
            return
        time.sleep(0.01)


def _interpreter_flags() -> list[str]:
    """The worker's own interpreter options (``-I``, the bytecode prefix or ``-B``), for its sibling."""
    orig = list(getattr(sys, "orig_argv", []))
    if "-c" in orig:
        return orig[1:orig.index("-c")]
    return ["-I", "-B"]


def _die_with_parent() -> None:
    """Linux: this process is killed when the worker that started it dies."""
    with contextlib.suppress(Exception):
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG


class _Hang(Exception):
    pass


def _alarm(signum: int, frame: FrameType | None) -> None:
    raise _Hang("the dry run took too long")


def dry_runs(spec: Spec, tokens: list[str], threads: int, budget_s: float = BUDGET_S,
             record: Recorder | None = None, after_case: Callable[[], object] | None = None) -> dict[str, float]:
    """Call the candidate on each case with Triton's launches turned into compiles on ``threads``
    threads; what was started, tried and compiled. ``record``: a ``tritonlaunch.Recorder`` given
    each launch, as the worker's recorder would see it; ``after_case``: called after each case."""
    from concurrent.futures import ThreadPoolExecutor

    import torch
    from triton.runtime._async_compile import AsyncCompileMode

    from ..protocol.cases import Case
    from ..protocol.inputs import materialize
    from .calling import kwargs_for

    start = time.monotonic()
    stats: dict[str, float] = {"cases": 0, "failed": 0, "compiled": 0}
    signal.signal(signal.SIGALRM, _alarm)
    with _launches_compile_only(record) as compiled, ThreadPoolExecutor(max(1, threads)) as pool, \
            AsyncCompileMode(pool):
        for token in tokens:
            if time.monotonic() - start > budget_s:
                break
            try:
                case = Case.from_token(token)
                if _case_bytes(spec, case) > MAX_CASE_BYTES:
                    continue
                signal.alarm(int(CASE_LIMIT_S))
                m = materialize(spec, case, "cuda")
                _dry_call(spec, m.tensors, kwargs_for(spec, case.dims), case.grad_layout)
                stats["cases"] += 1
            except BaseException as exc:  # noqa: BLE001 - the candidate's code on values no kernel computed
                if isinstance(exc, (KeyboardInterrupt, SystemExit)):
                    raise
                stats["failed"] += 1
            finally:
                signal.alarm(0)
                m = None  # type: ignore[assignment]
            if after_case is not None:
                after_case()
        stats["compiled"] = compiled[0]
    with contextlib.suppress(Exception):
        torch.cuda.synchronize()
    stats["seconds"] = round(time.monotonic() - start, 2)
    return stats


def _case_bytes(spec: Spec, case: Case) -> int:
    from ..protocol.cases import case_bytes

    try:
        return int(case_bytes(spec, case.dims, case.inputs))
    except Exception:  # noqa: BLE001 - unknown: built anyway (the budget of the check applies)
        return 0


def _dry_call(spec: Spec, tensors: Mapping[str, torch.Tensor], kwargs: Mapping[str, object], grad_layout: str) -> None:
    """The candidate, forward and (where the spec asks for gradients) backward, with zeros for the
    upstream gradient in the case's layout: the kernels' arguments, as a real call gives them."""
    import torch

    from .calling import grad_tensor, normalize

    leaves = {g: tensors[g].detach().requires_grad_(True) for g in spec.grads}
    outs = normalize(spec.fn(**{**tensors, **leaves}, **kwargs))
    diff = [v for v in outs.values() if isinstance(v, torch.Tensor) and v.requires_grad]
    if diff and leaves:
        gos = [grad_tensor(torch.zeros_like(v), v.dtype, grad_layout) for v in diff]
        torch.autograd.grad(diff, list(leaves.values()), gos, allow_unused=True)


@contextlib.contextmanager
def _launches_compile_only(record: Recorder | None = None) -> Iterator[list[int]]:
    """Every ``JITFunction`` launch becomes a warmup (compiled, not run); an autotuned kernel is
    skipped (its configs are for the worker's runs to pick). Yields a one-item list: how many
    specializations were sent to compile. ``record``: a recorder given each launch."""
    from triton.runtime.jit import JITFunction

    from .tritonlaunch import describe

    count = [0]
    run = JITFunction.run

    def warm(self: object, *args: object, grid: object = None, warmup: bool = False, **kwargs: object) -> object:
        count[0] += 1
        out = run(self, *args, grid=grid, warmup=True, **kwargs)
        if record is not None:
            launch = describe(self, args, {**kwargs, "grid": grid})
            if launch is not None:
                record.add(launch)
        return out

    patched: list[tuple[type, str, Callable[..., object]]] = [(JITFunction, "run", run)]
    JITFunction.run = warm
    with contextlib.suppress(ImportError):
        from triton.runtime.autotuner import Autotuner

        patched.append((Autotuner, "run", Autotuner.run))
        Autotuner.run = lambda self, *a, **k: None
    try:
        yield count
    finally:
        for cls, name, original in patched:
            setattr(cls, name, original)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    path = Path(argv[0])
    _die_with_parent()
    data = json.loads(path.read_text())
    job = Job.from_json(data["job"])
    from .tritonlaunch import Recorder
    from .loader import load_spec

    repo_root = Path(data["repo_root"])
    settings = job.options.get("compile")
    record = Recorder() if data.get("builds") and isinstance(settings, dict) else None
    try:
        spec = load_spec(job, repo_root, path.parent)
        # the cases, from the worker once the judge has its schedule; none (end of input): nothing to do
        line = sys.stdin.readline()
        asked = json.loads(line) if line.strip() else {}
        threads = int(asked.get("threads") or 2)
        builder = _Builds(record, settings, job, repo_root, path.parent, threads) \
            if asked and record is not None and isinstance(settings, dict) else None
        stats: dict[str, Any] = dry_runs(spec, [str(t) for t in asked.get("cases") or []], threads, record=record,
                                         after_case=builder.start_if_known if builder else None) \
            if asked else {"asked": False}
        if builder is not None:
            stats.update(builder.done())
    except BaseException as exc:  # noqa: BLE001 - said in its log; the worker compiles as before
        stats = {"error": f"{type(exc).__name__}: {exc}"[:300]}
    (path.parent / "done.json").write_text(json.dumps(stats))
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


class _Builds:
    """The compile check's builds of the launched specializations (the first ``MAX_COMPILED`` of
    the job's kernels, as the worker's ``finish`` takes them), started on a thread of their own
    as soon as the dry runs have launched that many, beside the rest of the dry runs: the worker's
    ``finish``, the job's last step, then finds them built instead of waiting for them."""

    def __init__(self, record: Recorder, settings: dict[str, Any], job: Job, repo_root: Path, here: Path,
                 threads: int) -> None:
        self.record, self.settings, self.job, self.repo_root, self.here = record, settings, job, repo_root, here
        self.threads = threads
        self.thread: Any = None
        self.stats: dict[str, object] = {}

    def start_if_known(self) -> None:
        from .specializations import MAX_COMPILED, repo_launches

        if self.thread is not None:
            return
        if len(repo_launches(list(self.record.launches), self.repo_root, self.job.kernels)) >= MAX_COMPILED:
            self._start(early=True)

    def _start(self, early: bool) -> None:
        import threading

        launches = list(self.record.launches)  # what was launched so far: the first ones are built
        (self.here / "building").write_text("")
        self.thread = threading.Thread(target=self._build, args=(launches, early), name="builds", daemon=True)
        self.thread.start()

    def _build(self, launches: list[Launch], early: bool) -> None:
        try:
            # beside the dry runs, half the threads: their compiles go on meanwhile
            threads = max(1, self.threads // 2) if early else self.threads
            self.stats = {**_build_launched(launches, self.settings, self.job, self.repo_root, self.here,
                                            threads), "launched_early": early}
        except Exception as exc:  # noqa: BLE001 - the worker builds them itself
            self.stats = {"launched_error": f"{type(exc).__name__}: {exc}"[:300]}

    def done(self) -> dict[str, object]:
        """After the dry runs: the builds, started now where the dry runs launched fewer."""
        if self.thread is None:
            self._start(early=False)
        self.thread.join()
        return self.stats


def _build_launched(launches: list[Launch], settings: dict[str, Any], job: Job, repo_root: Path, here: Path,
                    threads: int) -> dict[str, float]:
    """The dry runs' launches of the job's kernels, compiled for the compile check's archs, into
    ``launched.json`` for the worker's ``finish``; ``building`` says it is under way, and is gone
    once they are written."""
    from ..protocol.archs import DEFAULT_ARCHS, normalise_archs
    from .specializations import build_ahead, repo_launches

    start = time.monotonic()
    mine = repo_launches(launches, repo_root, job.kernels)
    built = build_ahead(mine, normalise_archs(settings.get("archs") or DEFAULT_ARCHS), threads)
    (here / "launched.tmp").write_text(json.dumps(built))
    (here / "launched.tmp").replace(here / "launched.json")
    with contextlib.suppress(OSError):
        (here / "building").unlink()
    return {"launched_built": len(built), "launched_s": round(time.monotonic() - start, 2)}


def boot() -> str:
    """The sibling's program: as the worker's (see executor), gpu-gate's own directory at the end of
    sys.path where it is not installed (``-I`` ignores PYTHONPATH)."""
    here = str(Path(__file__).resolve().parents[2])
    return ("import sys, importlib.util\n"
            f"if importlib.util.find_spec('gpu_gate') is None: sys.path.append({here!r})\n"
            "from gpu_gate.worker.ahead import main\n"
            "main()")
