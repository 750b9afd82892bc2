"""The compile check: every changed kernel compiles for every target architecture.

Runs without a GPU, judged like the other checks: its worker (``compiler``, in its sandbox)
imports the kernel files' Triton modules and runs the compilers (CUDA files through nvcc,
``.cuh``/``.h`` headers through a generated one-line translation unit; Triton files through
``triton.compile`` for a ``GPUTarget``), and answers with facts (see
:class:`~gpu_gate.protocol.messages.CompileFacts`). This module, in the judge, asks one file at a
time, reads the answers (:mod:`.compile_facts`) and decides. In a pull request a second worker
(``base``) compiles the base's tree, and the findings read from the compiled code are told new from
pre-existing (:mod:`.compiled_base`). Resource usage is always reported in ``extra.resources`` and
can be gated.

Options (``job.options``, from the policy):
    archs: ["sm_80", "sm_90"]      target architectures
    include_dirs: []               repo-relative include directories
    nvcc_flags: []                 extra nvcc flags (e.g. ["-maxrregcount=32"])
    max_spill_bytes / max_local_bytes: int | None
    resources_level: "required" | "advisory"   severity of a resource breach
    triton: {kernel: {"signature": {...}, "constexprs": {...}}}
    timeout_s: 300                 per compiler call
"""
from __future__ import annotations

from pathlib import Path
from typing import Any

from ...cuda.names import triton_kernel_names
from ...cuda.nvcc import KernelResources
from ...findings import Finding, Severity, Status
from ...job_extra import JobExtra
from ...protocol.archs import DEFAULT_ARCHS, lint_arch, normalise_archs
from ...protocol.jobs import Job, base_commit
from ...protocol.messages import CompileReply, CompileRequest, ErrorReply
from ...protocol.messages.compile import MAX_PTX
from ...protocol.roles import BASE, COMPILER
from ..channel import Channel, ProtocolViolation, WorkerLost, WorkerTimeout
from . import compiled_base
from .compile_facts import CHECK, NO_VALUES, PROTOCOL, Asked, Built, judge_file, protocol_finding
from .outcome import Context, Outcome, make_outcome

CUDA_SUFFIXES = (".cu",)
HEADER_SUFFIXES = (".cuh", ".h", ".hpp", ".hh", ".inl")


def run(job: Job, ctx: Context) -> Outcome:
    archs = tuple(normalise_archs(job.options.get("archs") or DEFAULT_ARCHS))
    channels = ctx.open_compilers(job)
    head = Tree(job, Path(ctx.repo_root), channels[COMPILER], archs, "compile worker", ctx.deadline)
    trees = [head]
    commit = base_commit(job)
    base = None
    if commit and BASE in channels and ctx.base_root is not None:
        # only the architecture whose PTX is read: the base's resources and compile errors are not compared
        base = Tree(job, Path(ctx.base_root), channels[BASE], (lint_arch(list(archs)),), "base's compile worker",
                    ctx.deadline)
        trees.append(base)
    for rel in job.kernels:
        for tree in trees:  # the base's worker compiles beside the head's
            tree.ask(rel)
        for tree in trees:
            if head.lost is None:  # a head that answers no more fails the job: the base's answer is moot
                tree.take(rel)
    outcome = head.outcome(job)
    if base is None or commit is None or outcome.status is Status.ERROR:
        return outcome
    return compiled_base.against_base(job, outcome, base.outcome(job), commit)


class Tree:
    """One tree's compile (the head's, or the base's), asked of its worker one file at a time."""

    def __init__(self, job: Job, root: Path, channel: Channel, archs: tuple[str, ...], who: str,
                 deadline: float) -> None:
        self.job, self.root, self.channel, self.archs = job, root, channel, archs
        self.who, self.deadline = who, deadline
        self.built = Built()
        self.asked: dict[str, Asked] = {}
        self.lost: str | None = None  # why the worker answers no more

    def ask(self, rel: str) -> None:
        path = self.root / rel
        if not path.is_file():
            self.built.findings.append(Finding(CHECK, "missing-file", f"{rel}: not in the working tree; nothing "
                                               "compiled", Severity.NOTE, file=rel))
            return
        kernels: tuple[tuple[str, int], ...] = ()
        if rel.endswith(".py"):
            kernels = tuple((d.name, d.line) for d in triton_kernel_names(path.read_text(errors="replace")))
            if not kernels:
                return  # no Triton kernel in it: nothing to import
        elif not rel.endswith(CUDA_SUFFIXES + HEADER_SUFFIXES):
            return
        asked = Asked(rel, self.archs, lint_arch(list(self.archs)), kernels, _no_values_severity(self.job))
        if self.lost is not None:
            self.built.findings.append(Finding(CHECK, "not-compiled", f"{rel}: not compiled: {self.lost}",
                                               Severity.NOTE, file=rel))
            return
        options = self.job.options
        request = CompileRequest(rel, self.archs, asked.read_arch, tuple(dict.fromkeys(n for n, _ in kernels)),
                                 dict(options.get("triton") or {}),
                                 tuple(str(d) for d in options.get("include_dirs", [])),
                                 tuple(str(f) for f in options.get("nvcc_flags", [])),
                                 float(options.get("timeout_s", 300)), tuple(self.job.python_path))
        try:
            # a PTX text per kernel asked for (a CUDA file's one), each bounded: what is claimed beyond
            # that is a protocol finding before a byte of it is read
            self.channel.ask(request, (), MAX_PTX * max(1, len(request.kernels)))
        except WorkerLost:
            self._lose(rel, "crash", f"the {self.who} exited or died before answering (while it started, or while "
                                     f"importing or compiling an earlier file)", "nothing was compiled")
            return
        self.asked[rel] = asked

    def take(self, rel: str) -> None:
        asked = self.asked.pop(rel, None)
        if asked is None:
            return
        try:
            reply, blobs = self.channel.answer(self.deadline)
        except WorkerTimeout:
            self._lose(rel, "timeout", f"the {self.who} did not answer within the job's time budget (a compile "
                                       f"that hangs, or one too slow)", "nothing was compiled")
            return
        except ProtocolViolation as exc:  # read on receipt (gpu_gate.protocol.messages.compile)
            self.built.findings.append(protocol_finding(rel, str(exc.__cause__ or exc)[:500]))
            self.lost = f"the {self.who}'s answer on {rel} could not be read"
            return
        except WorkerLost:
            self._lose(rel, "crash", f"the {self.who} exited or died before answering (while importing or compiling "
                                     f"it)", "nothing it compiled was read")
            return
        if isinstance(reply, ErrorReply):
            said = (reply.message or reply.error)[:500]
            self._lose(rel, "worker-error", f"the {self.who} failed ({said})", "nothing it compiled was read")
            return
        if not isinstance(reply, CompileReply):  # read_reply gives a compile request no other reply
            self.built.findings.append(protocol_finding(rel, f"a {type(reply).__name__}"))
            self.lost = f"the {self.who}'s answer on {rel} could not be read"
            return
        judge_file(asked, reply.facts, blobs, self.built)

    def _lose(self, rel: str, kind: str, what: str, consequence: str) -> None:
        """The worker answers no more: a finding for ``rel``, and the job fails closed."""
        self.built.findings.append(Finding(CHECK, kind, f"{rel}: {what}: {consequence}", file=rel))
        self.lost = what

    def outcome(self, job: Job) -> Outcome:
        built = self.built
        lost = self.lost
        if lost is None and any(f.kind == PROTOCOL for f in built.findings):
            lost = f"the {self.who}'s answer could not be read"
        return _outcome(built.findings + resource_findings(job, built.resources), built.resources, built.compiled,
                        built.linted, lost)


def _no_values_severity(job: Job) -> Severity:
    return Severity.ERROR if job.options.get("no_values") == "fail" else Severity.WARNING


def _outcome(findings: list[Finding], resources: list[KernelResources], compiled: int,
             linted: list[str] | None = None, lost: str | None = None) -> Outcome:
    """``lost``: why the worker's answers stopped or could not be read (nothing after is judged:
    the job fails closed)."""
    extra = JobExtra(resources=[_resource_row(r) for r in resources], linted=sorted(set(linted or [])))
    if lost is not None:
        return make_outcome(Status.ERROR, findings, reason=lost, extra=extra)
    if any(f.kind == "tool-missing" for f in findings):
        return make_outcome(Status.ERROR, findings, reason="a compiler could not be found", extra=extra)
    if any(f.severity is Severity.ERROR for f in findings):
        return make_outcome(Status.FAILED, findings, cases=compiled, extra=extra)
    unknown = [f for f in findings if f.kind == NO_VALUES]
    if compiled == 0 and unknown and len(unknown) == len([f for f in findings if f.severity is not Severity.NOTE]):
        # Nothing compiled only for want of values: nothing was checked, so not run (never passed);
        # the policy (no_values: warn) calls that advisory, so it does not fail closed either.
        extra.not_run_allowed_by = "checks.compile.no_values: warn"
        # what decided it is the kernels' signatures and the policy's values, both under the job's key
        extra.not_run_by_code = "no constexpr or signature values known for any kernel"
        return make_outcome(Status.NOT_RUN, findings, cases=0, extra=extra,
                            reason=f"0 of {len(unknown)} Triton kernel(s) compiled: no constexpr or signature "
                                   f"values known")
    if compiled == 0 and findings:
        return make_outcome(Status.NOT_RUN, findings, reason="no kernel could be compiled", extra=extra)
    return make_outcome(Status.PASSED, findings, cases=compiled, extra=extra)


def _resource_row(r: KernelResources) -> dict[str, object]:
    keys = ("kernel", "arch", "registers", "spill_store", "spill_load", "local_bytes", "shared_bytes")
    row = {k: getattr(r, k) for k in keys}
    row["symbol"] = r.symbol
    return row


def resource_findings(job: Job, resources: list[KernelResources]) -> list[Finding]:
    """Spill and local-memory breaches of the policy's limits."""
    return resource_findings_for(job.options, resources)


def resource_findings_for(options: dict[str, Any], resources: list[KernelResources]) -> list[Finding]:
    severity = Severity.ERROR if options.get("resources_level") == "required" else Severity.WARNING
    max_spill = options.get("max_spill_bytes")
    max_local = options.get("max_local_bytes")
    out = []
    for r in resources:
        spill = r.spill_store + r.spill_load
        where = f"{r.kernel} ({r.arch})"
        if max_spill is not None and spill > int(max_spill):
            out.append(Finding(CHECK, "spills", f"{where}: {r.spill_store} bytes spill stores and {r.spill_load} bytes "
                               f"spill loads exceed max_spill_bytes={max_spill}", severity, details=_resource_row(r)))
        if max_local is not None and r.local_bytes > int(max_local):
            out.append(Finding(CHECK, "local-memory", f"{where}: {r.local_bytes} bytes of local memory (stack frame) "
                               f"exceed max_local_bytes={max_local}", severity, details=_resource_row(r)))
    return out
