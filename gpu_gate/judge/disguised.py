"""The disguised replay (issue 39, part 1): a few passed cases run again in a process started like a
user's own program, and its outputs judged as the worker's were.

The gate's workers are disguised (see :mod:`gpu_gate.worker.disguise`), but what they cannot hide
(the gate's files on disk, the frames of its serving loop, the sandbox's PID 1) a kernel can still
look for, out of sight of the ``gate-aware`` rule (a read spelt out of pieces). So, last of all, the
judge hands the cases it chose to a program that has nothing of the gate in it
(:mod:`gpu_gate.worker.user_program`, run as ``python train.py``), in a sandbox the executor
prepared (:mod:`gpu_gate.executor.disguised`) in which no file of gpu-gate's installation is shown,
with a training job's environment and empty caches of its own. Inputs go in and outputs come back as
plain files of bytes; the judge reads an output only where the reference says one of that shape is,
and only as many bytes as that shape holds. A kernel that passed a case in the worker and fails it
there behaves differently outside the gate: a blocking ``gate-aware`` finding.

The judge, not the worker, starts the program: the case it runs is chosen after the rest of the job,
so nothing the candidate did earlier in its worker knew which it would be.
"""
from __future__ import annotations

import dataclasses
import json
import os
import shutil
import signal
import stat
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .. import proc
from ..protocol.cases import Case
from ..protocol.jobs import Job, carried, for_candidate

from ..findings import Finding, Severity

if TYPE_CHECKING:
    import torch

    from ..protocol.inputs import Materialized
    from .equivalence.engine import CaseRunner

PROGRAM = Path(__file__).resolve().parent.parent / "worker" / "user_program.py"
SCRIPT = "train.py"
MAX_INDEX_BYTES = 1 << 20  # out.json: a few lines per output; anything larger is not the program's
# dtypes an output may come back in (a name the program writes is only looked up among these)
DTYPES = ("float64", "float32", "float16", "bfloat16", "int64", "int32", "int16", "int8", "uint8", "bool",
          "complex64", "complex128", "float8_e4m3fn", "float8_e5m2")
MIN_TIME_S = 30.0  # the least time left in the job's budget for the replay to start at all


@dataclasses.dataclass(frozen=True)
class Launch:
    """How the executor said to start the program: its sandboxed command line, environment, the
    directory it reads and writes, and where it runs from."""

    argv: tuple[str, ...]
    env: dict[str, str]
    dir: Path
    cwd: Path

    @classmethod
    def from_context(cls, value: object) -> Launch | None:
        if not isinstance(value, dict):
            return None
        argv, env, d, cwd = value.get("argv"), value.get("env"), value.get("dir"), value.get("cwd")
        if not (isinstance(argv, list) and argv and all(isinstance(a, str) for a in argv) and isinstance(env, dict)
                and isinstance(d, str) and isinstance(cwd, str)):
            return None
        return cls(tuple(argv), {str(k): str(v) for k, v in env.items()}, Path(d), Path(cwd))


@dataclasses.dataclass
class Ran:
    """One case as the program ran it: ``ok`` with its outputs (plain tensors or values), or how it failed."""

    status: str  # ok, failed, unsupported, oom, missing (no result: the program stopped before it)
    message: str = ""
    outputs: dict[str, object] = dataclasses.field(default_factory=dict)
    others: dict[str, str] = dataclasses.field(default_factory=dict)  # outputs that were neither: their type


class NotRun(Exception):
    """The program could not be run, or said nothing that can be read: why."""


def spec_source(job: Job, repo_root: Path, folder: Path, base: bool = False) -> tuple[Path, str]:
    """The spec's file as the candidate's worker (or, ``base``, the base's) loads it (the base's source
    where the job carries it, written into ``folder``), and the name of the spec in it."""
    assert job.spec is not None
    spec = carried(job if base else for_candidate(job))
    if spec is None:
        return repo_root / job.spec.file, job.spec.name
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / Path(str(spec.get("file") or "spec.py")).name
    path.write_text(str(spec["source"]), encoding="utf-8")
    return path, str(spec.get("name") or job.spec.name)


def module_name(rel: str) -> str:
    """The dotted name a user's script would import the spec module by (``gate/rms.py``: ``gate.rms``)."""
    stem = rel[:-3] if rel.endswith(".py") else rel
    parts = [p for p in Path(stem).parts if p not in ("", ".")]
    return ".".join("".join(c if c.isalnum() or c == "_" else "_" for c in p) for p in parts) or "spec"


def _bytes_of(t: torch.Tensor) -> bytes:
    import torch

    c = t.detach().contiguous().cpu()
    return c.reshape(-1).view(torch.uint8).numpy().tobytes() if c.numel() else b""


def write_program(launch: Launch, job: Job, device: str, base: bool = False) -> None:
    """The program, the spec's file and what it loads (``job.json``: the spec's file and name, the
    import path, the device), into the program's directory (emptied first: nothing of an earlier
    program is left)."""
    assert job.spec is not None
    d = launch.dir
    fresh(d)
    _write_new(d / SCRIPT, program_text().encode())
    repo_root = launch.cwd  # the tree the program runs from: the head's, or the base's
    spec_file, name = spec_source(job, repo_root, d / "spec", base)
    loads = {"spec_file": str(spec_file), "module": module_name(job.spec.file), "name": name,
             "path": [str(repo_root / rel) if rel else str(repo_root) for rel in (job.python_path or ("",))],
             "device": device}
    _write_new(d / "job.json", json.dumps(loads).encode())


def write_batch(launch: Launch, cases: Sequence[tuple[Case, Materialized, Mapping[str, Any] | None,
                                                     Mapping[str, str]]]) -> None:
    """The batch of cases (dims, inputs as bytes, upstream gradients' recipes), beside the program.
    Files the program made under these names refuse the write (:class:`FileExistsError`)."""
    d = launch.dir
    blob = bytearray()
    listed = []
    for case, m, upstream, layouts in cases:
        inputs = {}
        for k, t in m.tensors.items():
            raw = _bytes_of(t)
            inputs[k] = {"dtype": str(t.dtype).removeprefix("torch."), "shape": list(t.shape), "stride": list(t.stride()),
                         "layout": layouts.get(k, "contiguous"), "at": len(blob), "nbytes": len(raw)}
            blob.extend(raw)
        listed.append({"id": case.id, "dims": dict(case.dims), "inputs": inputs, "upstream": upstream})
    _write_new(d / "batch.bin", bytes(blob))
    _write_new(d / "batch.json", json.dumps({"cases": listed}).encode())


def program_text() -> str:
    """The program as it is written out: without its docstrings and comments (a kernel that reads the
    script it runs under learns what the code does, not what it is for)."""
    import ast

    tree = ast.parse(PROGRAM.read_text(encoding="utf-8"))
    for node in ast.walk(tree):
        body = getattr(node, "body", None)
        if (isinstance(node, (ast.Module, ast.FunctionDef, ast.ClassDef)) and isinstance(body, list) and body
                and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant)
                and isinstance(body[0].value.value, str)):
            body.pop(0)
            if not body:
                body.append(ast.Pass())
    return ast.unparse(tree) + "\n"


def fresh(d: Path) -> None:
    """Empty the program's directory (what a program left there, links included, is removed without
    being followed) and give it an empty home directory."""
    for entry in os.scandir(d):
        if entry.is_dir(follow_symlinks=False):
            shutil.rmtree(entry.path)
        else:
            os.unlink(entry.path)
    (d / "home").mkdir()


def _write_new(path: Path, data: bytes) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o644)
    with os.fdopen(fd, "wb") as f:
        f.write(data)


def _open_regular(path: Path) -> Any:
    """``path`` opened for reading where it is a regular file the program wrote, never through a link
    (a program's ``out.bin`` linked to a file of the runner's would have that file's bytes judged, and
    shown in a mismatch's message)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
    except OSError as exc:
        raise NotRun(f"the program's {path.name} cannot be opened ({exc.strerror or exc})") from exc
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise NotRun(f"the program's {path.name} is not a regular file")
    return os.fdopen(fd, "rb")


def read_results(launch: Launch, n: int, device: str,
                 truth_of: Callable[[int, dict[str, str]], Mapping[str, torch.Tensor]]) -> list[Ran]:
    """What the program wrote for its ``n`` cases. ``truth_of(i, dtypes)``: the reference's outputs on
    case i for outputs of those dtypes; an output is read only where the reference has one of that
    shape, and only the bytes that shape holds in the dtype the program names (one of
    :data:`DTYPES`). Everything else it says is a status and a line of text."""
    index = launch.dir / "out.json"
    if not os.path.lexists(index):
        raise NotRun("the program wrote no results")
    with _open_regular(index) as f:
        text = f.read(MAX_INDEX_BYTES + 1)
    if len(text) > MAX_INDEX_BYTES:
        raise NotRun(f"the program's out.json is over {MAX_INDEX_BYTES} bytes (at most that many are read)")
    try:
        data = json.loads(text.decode("utf-8"))
        load, results = data["load"], data["results"]
        if not isinstance(results, list) or not isinstance(load, dict):
            raise TypeError("not a mapping with a list of results")
    except (ValueError, KeyError, TypeError) as exc:
        raise NotRun(f"the program's out.json cannot be read ({type(exc).__name__})") from exc
    if load.get("status") != "ok":
        status = "unsupported" if load.get("status") == "unsupported" else "failed"
        return [Ran(status, str(load.get("message") or "")[:400])] * n
    ran: list[Ran] = []
    with _open_regular(launch.dir / "out.bin") as blob:
        for i in range(n):
            r = results[i] if i < len(results) else None
            if not isinstance(r, dict) or r.get("status") not in ("ok", "failed", "unsupported", "oom"):
                ran.append(Ran("missing", "the program stopped before this case"))
                continue
            if r["status"] != "ok":
                ran.append(Ran(str(r["status"]), str(r.get("message") or "")[:400]))
                continue
            outs = r.get("outputs")
            if not isinstance(outs, dict):
                ran.append(Ran("failed", "the program's result lists no outputs"))
                continue
            dtypes = {str(k): str(m.get("dtype")) for k, m in outs.items()
                      if isinstance(m, dict) and m.get("kind") == "tensor" and m.get("dtype") in DTYPES}
            ran.append(_outputs(outs, truth_of(i, dtypes), blob, device))
    return ran


def _outputs(outs: dict[str, Any], expected: Mapping[str, torch.Tensor], blob: Any, device: str) -> Ran:
    import torch

    got: dict[str, object] = {}
    others: dict[str, str] = {}
    for k, meta in outs.items():
        if not isinstance(meta, dict):
            continue
        kind = meta.get("kind")
        if kind == "value" and (meta.get("value") is None or isinstance(meta.get("value"), (bool, int, float))):
            got[str(k)] = meta.get("value")
            continue
        if kind != "tensor":
            others[str(k)] = str(meta.get("type") or "?")[:80]
            continue
        want = expected.get(str(k))
        dtype = meta.get("dtype")
        shape = meta.get("shape")
        if want is None or dtype not in DTYPES or not isinstance(shape, list) or list(want.shape) != shape:
            others[str(k)] = f"tensor of shape {shape} and dtype {dtype}"[:120]
            continue
        dt = getattr(torch, str(dtype))
        nbytes = want.numel() * torch.empty((), dtype=dt).element_size()
        at = meta.get("at")
        if meta.get("nbytes") != nbytes or not isinstance(at, int) or at < 0:
            others[str(k)] = "tensor whose bytes do not match its shape"
            continue
        blob.seek(at)
        raw = blob.read(nbytes)
        if len(raw) != nbytes:
            others[str(k)] = "tensor whose bytes are missing"
            continue
        t = torch.frombuffer(bytearray(raw), dtype=torch.uint8) if nbytes else torch.empty((0,), dtype=torch.uint8)
        got[str(k)] = (t.view(dt) if nbytes else torch.empty((0,), dtype=dt)).reshape(shape).to(device)
    return Ran("ok", outputs=got, others=others)


def launch_note(reason: str) -> str:
    return f"the disguised replay did not run: {reason}"


def clean(launch: Launch) -> None:
    """Remove what the batch and the program put in its directory (the inputs' bytes can be large)."""
    try:
        fresh(launch.dir)
    except OSError:
        pass


# --- judging what the program did ----------------------------------------------------------------

WHERE = ("run again in a process started like a user's own program (python train.py: no gpu-gate module "
         "loaded, none installed in its view, a training job's environment and empty caches)")


@dataclasses.dataclass
class Running:
    """The program on its way: started in a thread of the judge's, which goes on with the rest of the
    job (the growth sweep, the worker's own replay) while it imports torch and compiles."""

    launch: Launch
    cases: list[Case]
    limit: float
    base: bool
    thread: threading.Thread
    go: int | None = None  # the write end of the program's standard input, until its batch is given
    done: list[proc.ProcResult] = dataclasses.field(default_factory=list)
    pid: list[int] = dataclasses.field(default_factory=list)
    timer: threading.Timer | None = None

    def wait(self) -> proc.ProcResult:
        self.thread.join()
        if self.timer is not None:
            self.timer.cancel()
        return self.done[0]

    def release(self, cases: list[Case], limit: float) -> None:
        """Tell the waiting program its batch is written (``go``): from now on it has ``limit`` seconds."""
        self.cases, self.limit = cases, limit
        self._say(b"go\n")
        self.timer = threading.Timer(limit, self._kill)
        self.timer.daemon = True
        self.timer.start()

    def _say(self, line: bytes) -> None:
        fd, self.go = self.go, None
        if fd is None:
            return
        try:
            os.write(fd, line)
        except OSError:  # the program is gone (or closed its input): its result says so
            pass
        finally:
            os.close(fd)

    def _kill(self) -> None:
        if self.thread.is_alive() and self.pid:
            try:
                os.killpg(self.pid[0], signal.SIGKILL)
            except OSError:
                pass

    def stop(self) -> None:
        """Kill the program where it still runs (its result is no longer wanted), and wait for it."""
        self._say(b"")
        self._kill()
        self.thread.join()
        if self.timer is not None:
            self.timer.cancel()
        clean(self.launch)


def prestart(runner: CaseRunner, launches: object, job: Job, deadline: float) -> Running | None:
    """Start the head's program before the job's cases: it imports torch and the spec (for a library
    that imports much, most of the replay's time) while they run, then waits for its batch, which
    :func:`begin` writes once the cases are chosen. None where it cannot start now (``begin`` then
    starts it as it always did)."""
    head = Launch.from_context(launches.get("candidate")) if isinstance(launches, dict) else None
    left = deadline - time.monotonic()
    if head is None or left < MIN_TIME_S:
        return None
    try:
        write_program(head, job, runner.candidate.device)
    except OSError:
        return None
    return _run(head, [], max(10.0, left - 5.0), False)  # until its batch is given: the job's time


def begin(runner: CaseRunner, cases: Sequence[Case], launches: object, job: Job,
          deadline: float, early: Running | None = None) -> Running | list[Finding]:
    """Start the disguised replay of ``cases`` (passed in the worker); or the notes that say why it
    does not run. Nothing (an empty list) where it was not prepared: the workers run in the gate's own
    process. ``early``: the head's program :func:`prestart` started, given its batch where it still
    waits for one and its directory takes it (a program that wrote files of those names, or exited,
    is stopped, and a new one started as without it)."""
    if early is not None:
        left = deadline - time.monotonic()
        if cases and left >= MIN_TIME_S and early.thread.is_alive():
            try:
                write_batch(early.launch, _batch(runner, list(cases)))
            except OSError:
                pass  # the program made files of those names (or the disk is full): a fresh one below
            else:
                early.release(list(cases), _limit(left))
                return early
        early.stop()
    if launches is None or not cases:
        return []
    if isinstance(launches, str):
        return [_note(runner, cases[0], launches, Severity.WARNING)]
    head = Launch.from_context(launches.get("candidate") if isinstance(launches, dict) else None)
    if head is None:
        return [_note(runner, cases[0], "the executor prepared no program for the head's code", Severity.WARNING)]
    left = deadline - time.monotonic()
    if left < MIN_TIME_S:
        return [_note(runner, cases[0], f"{max(0.0, left):.0f} s of the job's time budget were left", Severity.NOTE)]
    try:
        return _start(runner, head, list(cases), job, left)
    except OSError as exc:  # the program's directory could not be written (a full disk)
        return [_note(runner, cases[0], f"its files could not be written ({exc})", Severity.WARNING)]


def conclude(runner: CaseRunner, begun: Running | list[Finding], launches: object, job: Job,
             deadline: float) -> tuple[list[Finding], list[Finding]]:
    """The findings of a disguised replay :func:`begin` started, and notes on what could not be
    replayed. A case the program gets wrong is replayed in the worker again; only a kernel right there
    and wrong in the program is ``gate-aware``. In a pull request the base's code is run by the same
    program on that case before the finding counts as new."""
    from .equivalence.engine import marked

    if not isinstance(begun, Running):
        return [], begun
    failed, notes = _collect(runner, begun)
    findings: list[Finding] = []
    for case, f in failed:
        again = runner.replay(case)  # the worker's replay of the case, with its own noise and base logic
        if again:
            return again, notes  # wrong in the worker too: not a difference between the processes
        findings.append(f)
    base = Launch.from_context(launches.get("base") if isinstance(launches, dict) else None)
    if not findings or runner.base is None or base is None:
        return findings, notes
    left = max(deadline - time.monotonic(), MIN_TIME_S)
    try:
        at_base, _ = _collect(runner, _start(runner, base, [f_case(f, begun.cases) for f in findings], job, left,
                                             base=True))
    except OSError:  # the base's program could not be written: the head's findings stand (fail closed)
        return findings, notes
    same = {c.id for c, _ in at_base}
    return [marked(f, "pre-existing" if f.case in same else "new") for f in findings], notes


def f_case(f: Finding, cases: Sequence[Case]) -> Case:
    return next(c for c in cases if c.id == f.case)


def _note(runner: CaseRunner, case: Case, why: str, severity: Severity) -> Finding:
    from .equivalence.engine import _finding

    return _finding(runner.spec_id, case, "replay-not-run", launch_note(why), "", severity)


def _batch(runner: CaseRunner, cases: list[Case]
           ) -> list[tuple[Case, Materialized, Mapping[str, Any] | None, Mapping[str, str]]]:
    from ..protocol.inputs import materialize
    from ..protocol.messages.reference import recipe_json

    layouts = runner.plain_layouts()
    return [(case, materialize(runner.spec, case, runner.device), recipe_json(runner.ref.upstream(case)), layouts)
            for case in cases]


def _start(runner: CaseRunner, launch: Launch, cases: list[Case], job: Job, left: float,
           base: bool = False) -> Running:
    write_program(launch, job, runner.candidate.device, base)
    write_batch(launch, _batch(runner, cases))
    running = _run(launch, cases, _limit(left), base)
    running.release(cases, running.limit)
    return running


def _limit(left: float) -> float:
    """A replay's time once its batch is given, from the job's ``left`` seconds."""
    return max(10.0, min(left - 5.0, 300.0))


def _run(launch: Launch, cases: list[Case], limit: float, base: bool) -> Running:
    """The program started on a thread of the judge's, reading its standard input from a pipe whose
    write end the returned :class:`Running` holds (see :meth:`Running.release`)."""
    read, write = os.pipe()
    running = Running(launch, cases, limit, base, threading.Thread(target=lambda: None, daemon=True), go=write)

    def run() -> None:
        running.done.append(proc.run(launch.argv, cwd=launch.cwd, env=launch.env, timeout=limit,
                                     on_start=running.pid.append, stdin_fd=read))

    running.thread = threading.Thread(target=run, daemon=True)
    running.thread.start()
    return running


def _collect(runner: CaseRunner, running: Running) -> tuple[list[tuple[Case, Finding]], list[Finding]]:
    """Wait for the program and judge its outputs: (the cases it got wrong, each with its finding; notes)."""
    from .equivalence.engine import Truth

    pr = running.wait()
    cases, launch, limit = running.cases, running.launch, running.limit
    truths: dict[int, Truth] = {}

    def truth_of(i: int, dtypes: dict[str, str]) -> Mapping[str, torch.Tensor]:
        truths[i] = Truth(*runner.ref.truth_for(cases[i], dtypes)())
        return {k: v for k, v in truths[i].reference.items() if _is_tensor(v)}  # type: ignore[misc]

    try:
        try:
            ran = read_results(launch, len(cases), runner.device, truth_of)
        except NotRun as exc:
            if pr.not_found or (pr.returncode not in (0, None) and pr.stderr.lstrip().startswith("bwrap:")):
                why = pr.stderr.strip().splitlines()[0][:300] if pr.stderr.strip() else "it did not start"
                return [], [_note(runner, cases[0], f"its sandbox did not start ({why})", Severity.WARNING)]
            how = (f"it did not finish within {limit:.0f} s" if pr.timed_out else
                   f"it was killed by signal {pr.signal}" if pr.signal else
                   f"it exited with code {pr.returncode}" if pr.returncode else str(exc))
            tail = [ln for ln in pr.stderr.strip().splitlines() if ln.strip()][-1:]
            msg = f"{how}{': ' + tail[0][:300] if tail else ''}"
            return [(c, _gate_aware(runner, c, f"it failed: {msg}")) for c in cases], []
    finally:
        clean(launch)
    failed: list[tuple[Case, Finding]] = []
    notes: list[Finding] = []
    for i, (case, r) in enumerate(zip(cases, ran)):
        if r.status == "unsupported":
            notes.append(_note(runner, case, f"case {case.id}: {r.message}", Severity.NOTE))
            continue
        if r.status == "oom":  # the workers hold GPU memory of their own meanwhile: the gate's limit, not the kernel's
            notes.append(_note(runner, case, f"case {case.id}: the program ran out of GPU memory beside the job's "
                                             f"workers ({r.message})", Severity.WARNING))
            continue
        if r.status != "ok":
            failed.append((case, _gate_aware(runner, case, f"it failed: {r.message}")))
            continue
        truth = truths[i]
        for k in truth.reference:
            if k not in r.outputs:
                other = f" (it returned a {r.others[k]})" if k in r.others else ""
                failed.append((case, _gate_aware(runner, case, f"output {k!r} is missing{other}", output=k)))
                break
            comp = runner._compare(case, k, r.outputs, truth)
            if not comp.ok:
                failed.append((case, _gate_aware(runner, case, f"output {k!r} is wrong\n{comp.message}", output=k,
                                                 **comp.details)))
                break
    return failed, notes


def _is_tensor(v: object) -> bool:
    import torch

    return isinstance(v, torch.Tensor)


def _gate_aware(runner: CaseRunner, case: Case, what: str, **details: object) -> Finding:
    from .equivalence.engine import _finding

    repro = runner.repro_cmd.format(token=case.token())
    tuned = sorted(runner.autotuned)
    # An autotuned kernel runs there the config its autotuner times fastest, in the worker the one whose
    # turn it was: a config wrong on this case shows there only (a defect, whichever the name says).
    also = (f", or one of the configs of its autotuned kernels ({', '.join(n[:80] for n in tuned[:5])}) is wrong "
            f"here: the program's autotuner picks its own, the worker's took them in turn" if tuned else "")
    return _finding(runner.spec_id, case, "gate-aware",
                    f"the candidate passed case {case.id} in the gate's worker, but when the case was {WHERE}, {what}. "
                    f"The kernel behaves differently outside the gate: it may recognise the gate's process "
                    f"(its modules, command line, environment, files or process tree){also}", repro,
                    Severity.ERROR, disguised=True, **details)
