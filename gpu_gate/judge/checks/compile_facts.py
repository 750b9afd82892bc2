"""The compile check's findings from what its worker says it compiled (:class:`CompileFacts`).

The worker imported the kernel file's module, or ran nvcc, in its sandbox: its answer is data from
a process that ran code under review, read here field by field. What the compilers said becomes
findings here (compile errors, kernels with no values known, the races and 32-bit offsets read from
the PTX); an answer that does not fit the question (a kernel asked for and not answered, a build
for an architecture not asked, a built kernel with no PTX for the architecture read) is a
``protocol`` finding, which fails the job closed.
"""
from __future__ import annotations

import dataclasses
import os
from collections.abc import Sequence
from pathlib import Path

from ...cuda.nvcc import KernelResources
from ...findings import Finding, Severity
from ...protocol.messages import (CompileFacts, NvccFacts, ResourceFacts, TritonBuildFacts, TritonKernelFacts,
                                  ptx_text)
from ..compiled import ptxlint
from . import compiled_offsets, compiled_races

CHECK = "compile"
NO_VALUES = "not-compiled-no-values"  # a Triton kernel whose constexpr or signature values are unknown
PROTOCOL = "protocol"


@dataclasses.dataclass
class Built:
    """What one tree's compile answers add up to: findings, resources, how many builds compiled,
    and the kernels whose compiled code was read (the base's build is compared on these)."""

    findings: list[Finding] = dataclasses.field(default_factory=list)
    resources: list[KernelResources] = dataclasses.field(default_factory=list)
    compiled: int = 0
    linted: list[str] = dataclasses.field(default_factory=list)


@dataclasses.dataclass(frozen=True)
class Asked:
    """What the judge asked of one file: its architectures, the one whose PTX it reads, and for a
    Triton file the kernels it found in it (name, ``def`` line)."""

    file: str
    archs: tuple[str, ...]
    read_arch: str
    kernels: tuple[tuple[str, int], ...] = ()
    no_values: Severity = Severity.WARNING


def protocol_finding(rel: str, what: str) -> Finding:
    return Finding(CHECK, PROTOCOL, f"{rel}: the compile worker's answer is not one gpu-gate can read ({what}): "
                   f"nothing it said of this file was used", file=rel)


def judge_file(asked: Asked, facts: CompileFacts, blobs: Sequence[bytearray], into: Built) -> None:
    """Add what ``facts`` say of the file ``asked`` to ``into`` (``blobs``: the reply's, which hold
    the PTX texts the facts name)."""
    rel = asked.file
    if facts.file != rel:
        into.findings.append(protocol_finding(rel, f"it answered for {facts.file[:200]!r}"))
    elif not os.path.isabs(facts.root):
        into.findings.append(protocol_finding(rel, "its repository root is not an absolute path"))
    elif facts.tool_missing:
        into.findings.append(Finding(CHECK, "tool-missing", facts.tool_missing, file=rel))
    elif facts.language == "cuda":
        _cuda(asked, facts, ptx_text(facts.ptx, blobs), into)
    elif facts.import_error:
        into.findings.append(Finding(CHECK, "import-error", f"{rel}: importing the module failed: "
                                     f"{facts.import_error}", file=rel))
    else:
        _triton(asked, facts, blobs, into)


# --- CUDA ---------------------------------------------------------------------------------------


def _cuda(asked: Asked, facts: CompileFacts, ptx: str | None, into: Built) -> None:
    rel = asked.file
    if tuple(b.arch for b in facts.nvcc) != asked.archs:
        into.findings.append(protocol_finding(rel, f"nvcc builds for {[b.arch for b in facts.nvcc]}, "
                                                   f"asked for {list(asked.archs)}"))
        return
    for build in facts.nvcc:
        into.findings += nvcc_findings(build, rel)
        if build.ok:
            into.resources += [resources(r) for r in build.resources]
    into.compiled += len(asked.archs)
    if ptx is not None:
        root = Path(facts.root)
        into.linted += ptxlint.parse(ptx)[1]
        into.findings += compiled_races.findings_from_ptx(ptx, rel, root, asked.read_arch)
        into.findings += compiled_offsets.findings_from_ptx(ptx, rel, root, asked.read_arch)


def nvcc_findings(build: NvccFacts, rel: str) -> list[Finding]:
    arch = build.arch
    if build.not_found:
        return [Finding(CHECK, "tool-missing", f"{rel}: {build.how}", file=rel)]
    if build.timed_out:
        return [Finding(CHECK, "timeout", f"{rel} ({arch}): nvcc {build.how}", file=rel)]
    if build.ok:
        return []
    errors = [d for d in build.diagnostics if d.severity == "error"]
    if not errors:
        return [Finding(CHECK, "compile-error", f"{rel} ({arch}): nvcc failed, {build.how}\n{build.tail}", file=rel)]
    return [Finding(CHECK, "compile-error", f"{d.file or rel}:{d.line or '?'}: {d.message} ({arch})",
                    file=d.file or rel, line=d.line, details={"arch": arch}) for d in errors]


def resources(r: ResourceFacts, kernel: str | None = None, arch: str | None = None) -> KernelResources:
    """A resource row as the judge keeps it (``kernel``/``arch``: the names it is reported under)."""
    return KernelResources(kernel or r.kernel, r.symbol, arch or r.arch, r.registers, r.spill_store, r.spill_load,
                           r.local_bytes, r.shared_bytes, r.constant_bytes, r.barriers)


# --- Triton -------------------------------------------------------------------------------------


def _triton(asked: Asked, facts: CompileFacts, blobs: Sequence[bytearray], into: Built) -> None:
    rel = asked.file
    answered = [k.name for k in facts.kernels]
    wanted = list(dict.fromkeys(name for name, _ in asked.kernels))
    if answered != wanted:
        into.findings.append(protocol_finding(rel, f"it answered for Triton kernels {answered[:20]}, asked for "
                                                   f"{wanted[:20]}"))
        return
    by_name = {k.name: k for k in facts.kernels}
    for name, line in asked.kernels:
        _triton_kernel(asked, by_name[name], line, blobs, into)


def _triton_kernel(asked: Asked, kernel: TritonKernelFacts, line: int, blobs: Sequence[bytearray],
                   into: Built) -> None:
    rel, name = asked.file, kernel.name
    if not kernel.found:
        into.findings.append(Finding(CHECK, "not-compiled", f"{rel}:{line}: Triton kernel {name} is not a "
                                     "module-level name; it was not compiled", Severity.NOTE, file=rel, line=line))
        return
    if kernel.missing:
        need = ", ".join(kernel.missing)
        msg = (f"{rel}:{line}: Triton kernel {name}: not compiled: no values known for constexpr {need} (no default in "
               f"the kernel, none in checks.compile.triton.{name}.constexprs). On a GPU the equivalence job compiles "
               f"the specializations its cases launch")
        into.findings.append(Finding(CHECK, NO_VALUES, msg, asked.no_values, file=rel, line=line,
                                     details={"kernel": name, "missing": list(kernel.missing)}))
        return
    why = _builds_unfit(asked, kernel)
    if why is not None:
        into.findings.append(protocol_finding(rel, f"Triton kernel {name}: {why}"))
        return
    compiled = 0
    for build in kernel.builds:
        if not build.ok:
            into.findings.append(_triton_error(asked, kernel, line, build))
            continue
        compiled += 1
        into.resources += [resources(r, name, build.arch) for r in build.resources]
        ptx = ptx_text(build.ptx, blobs) if build.arch == asked.read_arch else None
        if ptx is not None:
            into.linted += ptxlint.parse(ptx)[1]
            into.findings += compiled_races.triton_findings(kernel.source, ptx, rel, build.arch)
            root = compiled_races.source_root(kernel.source, rel)
            into.findings += compiled_offsets.findings_from_ptx(ptx, rel, root, build.arch)
    into.compiled += compiled
    if kernel.guessed and compiled:
        sig = ", ".join(f"{k}: {v}" for k, v in kernel.signature.items())
        into.findings.append(Finding(CHECK, "guessed-signature", f"{rel}:{line}: Triton kernel {name} compiled with a "
                                     f"guessed signature ({sig}); set checks.compile.triton.{name}.signature to pin "
                                     f"it", Severity.NOTE, file=rel, line=line))


def _builds_unfit(asked: Asked, kernel: TritonKernelFacts) -> str | None:
    """Why the builds do not answer the question, or None: one per architecture asked, in order,
    cut short only after a failed build of a guessed signature (the same guess fails for every
    architecture); a build for the architecture read carries its PTX; the kernel's source is a path."""
    archs = tuple(b.arch for b in kernel.builds)
    failed = next((i for i, b in enumerate(kernel.builds) if not b.ok), None)
    expected = asked.archs[:failed + 1] if kernel.guessed and failed is not None else asked.archs
    if archs != expected:
        return f"builds for {list(archs)}, asked for {list(asked.archs)}"
    if any(b.ok and b.arch == asked.read_arch and b.ptx is None for b in kernel.builds):
        return f"built for {asked.read_arch} with no PTX"
    if not os.path.isabs(kernel.source):
        return "no source file"
    return None


def _triton_error(asked: Asked, kernel: TritonKernelFacts, line: int, build: TritonBuildFacts) -> Finding:
    rel, name, arch = asked.file, kernel.name, build.arch
    text = build.error.splitlines()
    first = build.message or "compile error"
    if kernel.guessed:
        # A guess of the argument types is gpu-gate's, not the kernel's: the kernel's types are unknown.
        msg = (f"{rel}:{line}: Triton kernel {name}: not compiled: no values known for its signature (the guessed "
               f"one did not compile: {first}); set checks.compile.triton.{name}.signature. On a GPU the "
               f"equivalence job compiles the specializations its cases launch")
        return Finding(CHECK, NO_VALUES, msg, asked.no_values, file=rel, line=line,
                       details={"arch": arch, "kernel": name, "error": "\n".join(text[-20:])})
    # Triton's CompilationError carries the offending AST node, numbered from the ``def`` line.
    err_line = line + build.node_line - 1 if build.node_line else line
    return Finding(CHECK, "compile-error",
                   f"{rel}:{err_line}: Triton kernel {name} does not compile for {arch}: {first}", file=rel,
                   line=err_line, details={"arch": arch, "kernel": name, "error": "\n".join(text[:40])})
