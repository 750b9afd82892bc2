"""A worker's life: read the job, import the spec, answer the judge until it says goodbye.

Started by the executor inside the job's sandbox as ``python -I -c BOOT CONTEXT.json FD ROLE``: FD
is its end of the socket to the judge, ROLE ``candidate``, ``reference``, ``base`` or ``compiler`` (the
compile check's, :mod:`.compile`); the judge sends the job, or the files to compile. It writes no result file;
its exit code decides nothing. When the judge goes away (the socket closes), it exits.
"""
from __future__ import annotations

import contextlib
import json
import os
import socket
import sys
import time
import types
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from ..proc import alive_s
from ..protocol import wire
from ..protocol.jobs import Job
from ..protocol.messages import (Ahead, AheadDone, AheadDoneReply, AheadReply, Bye, ErrorReply, Finish, FinishReply,
                                 Load, LoadReply, Reply, Request, SpecImportReply, Stats, StatsReply, read_request)
from ..protocol.roles import COMPILER

if TYPE_CHECKING:
    from collections.abc import Mapping
    from contextlib import AbstractContextManager

    from ..spec import Spec
    from . import reads
    from .candidate import CandidateServer
    from .kept_kernels import Seeding
    from .reference import ReferenceServer


class Handler(Protocol):
    """What answers the judge's requests: a worker of a spec (:class:`Worker`), or the compile
    check's (:class:`~.compile.CompileWorker`)."""

    def handle(self, request: Request, blobs: list[bytearray]) -> tuple[Reply, wire.Blobs]: ...



def _interpreter() -> types.ModuleType:
    """The interpreter's adaptations, imported only where they are used: they need numpy, which
    Triton's interpreter needs too but a GPU runner's worker may lack."""
    from . import interpreter

    return interpreter


def uses_triton(repo_root: Path) -> bool:
    """Whether code loaded from the repository (the spec and the kernels it imports) uses Triton.

    ``"triton" in sys.modules`` is no answer: torch imports Triton itself wherever it is
    installed, and a spec of plain torch code must keep its bf16 cases under the interpreter."""
    root = str(repo_root.resolve())
    for mod in list(sys.modules.values()):
        path = getattr(mod, "__file__", None) or ""
        if not path.startswith(root):
            continue
        for value in list(vars(mod).values()):
            name = value.__name__ if isinstance(value, types.ModuleType) else type(value).__module__
            if isinstance(name, str) and name.split(".")[0] == "triton":
                return True
    return False


class Worker:
    """One role's server, plus what every worker answers: ``load`` (import the job's spec) and
    ``finish`` (what the candidate launched)."""

    def __init__(self, role: str, context: dict[str, Any], workdir: Path, *, isolate: bool = True,
                 borrow: Worker | None = None, seeding: Seeding | None = None) -> None:
        """``borrow``: in one process, the worker whose imported spec this one uses (the spec
        module is imported once); ``seeding``: the copy of the kept kernels under way
        (see :mod:`.kept_kernels`), waited for before ``load`` answers."""
        self.role, self.workdir, self.isolate, self.borrow = role, workdir, isolate, borrow
        self.seeding = seeding
        self.repo_root = Path(context.get("repo_root") or os.getcwd())
        # the reference's: the tree its truth comes from (the base's), or why there is none
        self.truth_root = Path(context["truth_root"]) if context.get("truth_root") else None
        self.truth_missing = str(context["truth_missing"]) if context.get("truth_missing") else None
        self.device = context.get("device") or _pick_device()
        self.cuda_sync = str(context["cuda_sync"]) if context.get("cuda_sync") else None  # see .cuda_sync
        self.job: Job | None = None
        self.server: ReferenceServer | CandidateServer | None = None
        self._recorders: Any = None
        self._reads: reads.Recorder | None = None  # the repository files the candidate opened (see worker.reads)
        from .ahead import Ahead

        self.ahead = Ahead()  # the sibling that compiles the cases' kernels ahead (see worker.ahead)
        self.context: CudaContext | None = None
        self.adapted: list[str] = []  # the Triton interpreter's adaptations this worker put in place
        if role in ("candidate", "base"):
            # the base's too: a launched specialization that does not compile at head is compared
            # with the base's, launched the same way (see checks/compile_launched.against_base)
            self._record()
        if role == "candidate":
            from . import reads

            self._reads = reads.start(self.repo_root, ignore=workdir)  # before the spec's import: its module-level loads count

    def load(self, job: Job, spec: Spec | None = None) -> LoadReply | SpecImportReply:
        """Import the job's spec (again, for a job whose spec changed: the head's after the base's)."""
        from .loader import SpecImportError

        if self.role == "candidate":
            from ..protocol.jobs import for_candidate

            job = for_candidate(job)  # the head's call to the kernel, where the job says so
        self.job, self.server = job, None
        if self.role != "reference":
            # the sibling that will compile the cases' kernels ahead imports torch and the spec now,
            # beside this process, rather than after the judge has its schedule (see worker.ahead)
            self.ahead.early(job, self.repo_root, self.workdir, self.device, builds=self.role == "candidate")
        start = time.monotonic()
        try:
            import torch  # noqa: F401 - timed apart from the spec's own imports
        except ImportError:
            pass
        torch_s, start = time.monotonic() - start, time.monotonic()
        if self.context is None and self.device == "cuda":
            self.context = CudaContext(self.cuda_sync)  # created beside the spec's import, not in the first case
        module_s: float | None = None
        try:
            if self.role == "reference":
                from .reference import ReferenceServer

                self.server = ReferenceServer(job, self.repo_root, self.workdir, self.device, spec=spec,
                                              isolate=self.isolate, truth_root=self.truth_root,
                                              truth_missing=self.truth_missing)
            else:
                from .candidate import CandidateServer
                from .loader import load_spec

                self.adapted = self.adapted or _interpreter().install()  # before any kernel runs (see worker.interpreter)
                module_start = time.monotonic()
                loaded = spec if spec is not None else load_spec(job, self.repo_root, self.workdir)
                module_s = time.monotonic() - module_start
                if "triton.runtime.autotuner" in sys.modules:
                    from .autotune import take_in_turn

                    # autotuned kernels: each new key takes the next config, untimed (see worker/autotune)
                    take_in_turn(str(job.options.get("autotune") or "rotate"))
                self.server = CandidateServer(job, self.repo_root, self.device, loaded)
                self._record_specializations()
        except SpecImportError as exc:
            return SpecImportReply(exc.facts)
        spec_s = time.monotonic() - start
        module_s = spec_s if module_s is None else module_s  # the reference's: its server's start, whole
        late = self.context.late_settings() if self.context is not None else []
        # the kept kernels are in this worker's cache before any case (or the sibling) compiles
        seeded, self.seeding = self.seeding.wait() if self.seeding is not None else {}, None
        # timing, for the job's report: importing torch (at the worker's start) and the spec
        return LoadReply(self.device, torch_import_s=_TORCH_IMPORT_S[0] + torch_s, alive_s=alive_s(),
                         spec_import_s=spec_s, spec_module_s=module_s,
                         context_s=float(self.context.seconds or 0.0) if self.context is not None else 0.0,
                         **{k: float(v or 0.0) for k, v in seeded.items()},
                         late_cuda_settings=tuple(late),
                         uses_triton=uses_triton(self.repo_root) if self.role == "candidate" else None,
                         interpreter=tuple(self.adapted))

    def _record(self) -> None:
        """Coverage: every launch of the repository's kernels (hooked once Triton is imported)."""
        from . import launches

        coverage = launches.recording(self.repo_root)
        self._recorders = [coverage, coverage.__enter__(), None]

    def _record_specializations(self) -> None:
        """The Triton specializations launched, from the spec's import on (as the spec imports
        Triton, its launch classes exist by then)."""
        from . import tritonlaunch

        if self._recorders is not None and self._recorders[2] is None:
            rec = tritonlaunch.Recorder()
            tritonlaunch.start(rec)
            self._recorders[2] = rec

    def close(self) -> None:
        from . import reads, tritonlaunch

        if self._reads is not None:
            reads.stop(self._reads)  # the hook stays (it cannot be removed), idle
            self._reads = None

        if self.adapted:  # in the caller's process (a job run in-process), the interpreter is Triton's again
            _interpreter().uninstall()
            self.adapted = []

        if self._recorders is not None:
            if self._recorders[2] is not None:
                tritonlaunch.stop(self._recorders[2])
            self._recorders[0].__exit__(None, None, None)
            self._recorders = None

    def handle(self, request: Request, blobs: list[bytearray]) -> tuple[Reply, wire.Blobs]:
        if isinstance(request, Load):
            from ..protocol.jobs import for_candidate

            # in one process the reference borrows the candidate's spec, unless the candidate's is the
            # head's and the reference's the base's (the head's call with the base's spec)
            same = for_candidate(request.job) is request.job
            lent = getattr(self.borrow.server, "spec", None) if self.borrow is not None and same else None
            return self.load(request.job, lent), []
        if self.server is None:
            return ErrorReply(request.op, "protocol", "no spec is loaded"), []
        if isinstance(request, Finish):
            return self._finish(request), []
        if isinstance(request, Ahead):
            return self._ahead(request), []
        if isinstance(request, AheadDone):  # the sibling ends: what it compiled, for the job's timing report
            return AheadDoneReply(self.ahead.stop()), []
        if isinstance(request, Stats):  # what this worker moved through the channel, for the job's timing report
            return StatsReply(dict(wire.stats()), alive_s(), self.context.seconds if self.context is not None else None), []
        reply: tuple[Reply, wire.Blobs] = self.server.handle(request, blobs)
        return reply

    def _ahead(self, request: Ahead) -> AheadReply:
        """Compile the kernels of the cases named (tokens) in a process beside this one."""
        if self.role == "reference" or self.job is None:
            return AheadReply(skipped="only the code under test's workers compile ahead")
        threads = max(2, min(8, (os.cpu_count() or 4) // 2))
        started = self.ahead.start(self.job, list(request.cases[:MAX_AHEAD]), self.repo_root, self.workdir,
                                   self.device, threads, builds=self.role == "candidate")
        return AheadReply(started.get("ok") is True, started.get("skipped"))

    def _finish(self, request: Finish) -> FinishReply:
        """What the candidate launched: the repository's kernels (coverage) and the Triton
        specializations, compiled for the policy's archs where asked (see worker/specializations)."""
        if self._recorders is None or self.job is None:
            return FinishReply()
        coverage, specializations = self._recorders[1], self._recorders[2]
        laps: dict[str, float] = {}  # where this answer's time went, for the job's timing report
        lap = [time.monotonic()]

        def mark(name: str) -> None:
            now = time.monotonic()
            laps[name], lap[0] = round(now - lap[0], 2), now

        from ..protocol.archs import DEFAULT_ARCHS, normalise_archs
        from .specializations import MAX_COMPILED, compile_launched, repo_launches

        mine = repo_launches(specializations.launches if specializations else [], self.repo_root, self.job.kernels)
        launches = coverage.to_json()
        if self._reads is not None:
            launches["reads"] = self._reads.to_json()  # kept with the launches (see gpu_gate.coverage)
        specs = tuple({**launch.to_json(), "file": rel} for rel, launch in mine)
        mark("launches_s")
        settings, compiled, compile_taken = request.compile, None, None
        if mine and settings is not None and self.device == "cuda":
            # the sibling compiled most of them beside the cases (see worker.ahead); the rest are compiled here
            archs = normalise_archs(settings.get("archs") or DEFAULT_ARCHS)
            known = self.ahead.builds()
            compiled = compile_launched(mine, archs, known, root=str(self.repo_root))
            compile_taken = sum((launch.key, arch) in known for _, launch in mine[:MAX_COMPILED]
                                for arch in archs)  # for the timing report
        elif mine and settings is not None and os.environ.get("TRITON_INTERPRET") == "1":
            # no GPU: what the interpreter launched, compiled for the lint architecture in a child
            # process, so that its PTX is read for races and 32-bit offsets as on a GPU
            from ..protocol.archs import lint_arch
            from .interpreted_builds import compile_interpreted

            arch = lint_arch(normalise_archs(settings.get("archs") or DEFAULT_ARCHS))
            compiled = compile_interpreted(mine, arch, self.repo_root, self.job.python_path)
        mark("compile_s")
        from .autotune import untimed

        taken = tuple(untimed())
        # what the launches needed of the interpreter's adaptations (see worker.interpreter)
        adapted = {k: tuple(v) for k, v in _interpreter().used().items()} if self.adapted else None
        from ..store.bytecode import uncompiled_modules

        uncompiled = tuple(uncompiled_modules(self.repo_root))  # the gate keeps their bytecode (see bytecode)
        mark("bytecode_s")
        ahead = self.ahead.stop()  # what the sibling compiled, for the job's timing report
        mark("ahead_stop_s")
        return FinishReply(launches, specs, compiled, compile_taken, taken, uncompiled, ahead, laps, adapted)


class CudaContext:
    """The worker's CUDA context, created on a thread of its own while the spec imports (torch
    lets go of the interpreter while it allocates): the first case no longer waits for it.

    Settings read when the context is created (``CUDA_*``, ``PYTORCH_CUDA_*``, ``PYTORCH_NO_CUDA_*``)
    are then taken from the worker's environment, before the spec's import could change them: a
    spec that sets one at import gets it reported (:meth:`late_settings`), not silently dropped.
    ``sync``: how the host waits for the GPU (see :mod:`.cuda_sync`), set before the context exists;
    ``sync_error`` says why it could not be, if so (the worker then runs with CUDA's default)."""

    PREFIXES = ("CUDA_", "PYTORCH_CUDA_", "PYTORCH_NO_CUDA_")

    def __init__(self, sync: str | None = None) -> None:
        import threading

        self.seconds: float | None = None
        self.sync = sync
        self.sync_error: str | None = None
        self.before = self._settings()
        self.thread = threading.Thread(target=self._create, name="cuda-context", daemon=True)
        self.thread.start()

    @classmethod
    def _settings(cls) -> dict[str, str]:
        return {k: v for k, v in os.environ.items() if k.startswith(cls.PREFIXES)}

    def _create(self) -> None:
        start = time.monotonic()
        if self.sync:
            from .cuda_sync import set_mode

            self.sync_error = set_mode(self.sync)
        try:
            import torch

            torch.empty(1, device="cuda")
            torch.cuda.synchronize()
        except Exception:  # noqa: BLE001 - the first case meets the same error, and reports it
            return
        self.seconds = round(time.monotonic() - start, 2)

    def late_settings(self) -> list[str]:
        """The settings the spec's import set or changed after the context was created."""
        after = self._settings()
        return sorted(k for k in {*self.before, *after} if self.before.get(k) != after.get(k))


_TORCH_IMPORT_S = [0.0]
MAX_AHEAD = 4096  # cases one request may name


def _pick_device() -> str:
    start = time.monotonic()
    try:
        import torch
    except ImportError:
        return "cpu"
    finally:
        _TORCH_IMPORT_S[0] = time.monotonic() - start
    return "cuda" if torch.cuda.is_available() else "cpu"


def serve(sock: socket.socket, worker: Handler, settings: AbstractContextManager[object] | None = None) -> None:
    """Answer the judge until it says goodbye; ``settings``: what the answers run under (torch's
    deterministic settings unless given: the compile worker runs no tensor code)."""
    if settings is None:
        from .calling import torch_settings

        settings = torch_settings()
    with settings:
        while True:
            try:
                header, blobs = wire.recv(sock)
            except (wire.ChannelClosed, wire.BadMessage):
                return
            reply, out = answer(worker, header, blobs)
            if reply is None:
                return
            try:
                wire.send(sock, reply.to_json(), out)
            except wire.ChannelClosed:
                return


def answer(worker: Handler, header: Mapping[str, object], blobs: list[bytearray]) -> tuple[Reply | None, wire.Blobs]:
    """The worker's reply to a request (None: goodbye). A request that does not parse is answered
    with a protocol error, which the judge reports."""
    op = header.get("op")
    try:
        request = read_request(header, [len(b) for b in blobs])
    except wire.BadMessage as exc:
        return ErrorReply(op if isinstance(op, str) else "?", "protocol", str(exc)), []
    if isinstance(request, Bye):
        return None, []
    try:
        return worker.handle(request, blobs)
    except Exception as exc:  # noqa: BLE001 - reported to the judge, which decides
        from .calling import first_line, is_fatal

        return ErrorReply(request.op, "fatal" if is_fatal(exc) else "worker", f"{first_line(exc)}"), []


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    context_file, fd, role = argv[0], int(argv[1]), argv[2]
    return _run(json.loads(Path(context_file).read_text()), fd, role, Path(context_file).parent)


def run_boot(payload: str) -> int:
    """The start of a worker booted by :func:`.disguise.boot_program` (role, socket and context in it)."""
    boot = json.loads(payload)
    return _run(boot["context"], int(boot["fd"]), str(boot["role"]), Path(boot["context"]["workdir"]))


def _run(context: dict[str, Any], fd: int, role: str, workdir: Path) -> int:
    sock = socket.socket(fileno=fd)
    if role == COMPILER:
        from .compile import CompileWorker

        serve(sock, CompileWorker(context, workdir), contextlib.nullcontext())
        sock.close()
    else:
        from .heap import steady
        from .kept_kernels import start as start_seeding

        steady()  # before torch allocates anything: the base's worker and the head's alike (see .heap)

        seeding = start_seeding(context)  # first: it runs while torch is imported (see kept_kernels)
        worker = Worker(role, context, workdir, seeding=seeding)
        serve(sock, worker)
        sock.close()
        worker.ahead.stop()  # the sibling never outlives its worker (nor, so, the job)
    # Exit without tearing down the interpreter: a kernel's atexit code or a CUDA context the
    # candidate broke must not hang the exit.
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


BOOT = ("import sys, importlib.util\n"
        "from gpu_gate.worker.serve import main\n"
        "main()")
