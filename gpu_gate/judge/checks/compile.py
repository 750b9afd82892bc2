"""The compile check: every changed kernel compiles for every target architecture.

Runs without a GPU, inside the harness subprocess. CUDA files go through nvcc
(``.cuh``/``.h`` headers through a generated one-line translation unit); Triton
files through ``triton.compile`` for a ``GPUTarget``. Resource usage is always
reported in ``extra["resources"]`` and can be gated.

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

import tempfile
from pathlib import Path
from typing import Any

from ... import proc
from ...cuda import nvcc
from ..compiled import ptxlint
from ...worker import tritonc
from ...protocol.archs import DEFAULT_ARCHS, arch_number, lint_arch, normalise_archs
from . import compiled_offsets, compiled_races
from ...cuda.names import triton_kernel_names
from ...cuda.nvcc import KernelResources
from .outcome import Context, make_outcome
from ...findings import Finding, Severity, Status
from ...protocol.jobs import Job

CHECK = "compile"
CUDA_SUFFIXES = (".cu",)
HEADER_SUFFIXES = (".cuh", ".h", ".hpp", ".hh", ".inl")
NO_VALUES = "not-compiled-no-values"  # a Triton kernel whose constexpr or signature values are unknown


def run(job: Job, ctx: Context) -> Any:
    repo_root = Path(ctx.repo_root)
    archs = normalise_archs(job.options.get("archs") or DEFAULT_ARCHS)
    findings: list[Finding] = []
    resources: list[KernelResources] = []
    linted: list[str] = []  # the kernels whose compiled code was read (the base's build is compared on these)
    compiled = 0
    for rel in job.kernels:
        path = repo_root / rel
        if not path.is_file():
            findings.append(Finding(CHECK, "missing-file", f"{rel}: not in the working tree; nothing compiled",
                                    Severity.NOTE, file=rel))
            continue
        if rel.endswith(".py"):
            f, r, n = _triton_file(job, repo_root, rel, archs, linted)
        elif rel.endswith(CUDA_SUFFIXES + HEADER_SUFFIXES):
            f, r, n = _cuda_file(job, repo_root, rel, archs, linted)
        else:
            continue
        findings += f
        resources += r
        compiled += n
    findings += resource_findings(job, resources)
    return _outcome(findings, resources, compiled, linted)


def _outcome(findings: list[Finding], resources: list[KernelResources], compiled: int,
             linted: list[str] | None = None) -> Any:
    extra: dict[str, Any] = {"resources": [_resource_row(r) for r in resources], "linted": sorted(set(linted or []))}
    if any(f.kind == "tool-missing" for f in findings):
        return make_outcome(Status.ERROR, findings, reason="a compiler could not be found", extra=extra)
    if any(f.severity is Severity.ERROR for f in findings):
        return make_outcome(Status.FAILED, findings, cases=compiled, extra=extra)
    unknown = [f for f in findings if f.kind == NO_VALUES]
    if compiled == 0 and unknown and len(unknown) == len([f for f in findings if f.severity is not Severity.NOTE]):
        # Nothing compiled only for want of values: nothing was checked, so not run (never passed);
        # the policy (no_values: warn) calls that advisory, so it does not fail closed either.
        extra["not_run_allowed_by"] = "checks.compile.no_values: warn"
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


# --- CUDA -------------------------------------------------------------------


def _cuda_file(job: Job, repo_root: Path, rel: str, archs: list[str],
               linted: list[str]) -> tuple[list[Finding], list[KernelResources], int]:
    tool = nvcc.find_nvcc()
    if tool is None:
        msg = f"{rel}: nvcc not found (install the CUDA toolkit or set CUDA_HOME); the kernel was not compiled"
        return [Finding(CHECK, "tool-missing", msg, file=rel)], [], 0
    findings: list[Finding] = []
    resources: list[KernelResources] = []
    includes = [str(repo_root / d) for d in job.options.get("include_dirs", [])]
    includes += [str((repo_root / rel).parent), str(repo_root)]
    extra = [str(f) for f in job.options.get("nvcc_flags", [])]
    timeout = float(job.options.get("timeout_s", 300))
    with tempfile.TemporaryDirectory(prefix="gpu-gate-nvcc-") as tmp:
        source = rel if rel.endswith(CUDA_SUFFIXES) else _header_tu(Path(tmp), repo_root / rel)
        for arch in archs:
            argv = nvcc.cubin_argv(tool, source, arch, str(Path(tmp) / f"{arch}.cubin"), includes, extra)
            res = proc.run(argv, cwd=repo_root, timeout=timeout)
            findings += _nvcc_findings(res, rel, arch, repo_root)
            if res.ok:
                resources += nvcc.parse_resources(res.stderr + res.stdout, arch)
        read_arch = lint_arch(archs)
        ptx = compiled_races.cuda_ptx(tool, source, read_arch, includes, extra, repo_root, timeout)
        if ptx is not None:
            linted += ptxlint.parse(ptx)[1]
            findings += compiled_races.findings_from_ptx(ptx, rel, repo_root, read_arch)
            findings += compiled_offsets.findings_from_ptx(ptx, rel, repo_root, read_arch)
    return findings, resources, len(archs)


def _header_tu(tmp: Path, header: Path) -> str:
    tu = tmp / "header_check.cu"
    tu.write_text(f'#include "{header.resolve()}"\n')
    return str(tu)


def _nvcc_findings(res: proc.ProcResult, rel: str, arch: str, repo_root: Path) -> list[Finding]:
    if res.not_found:
        return [Finding(CHECK, "tool-missing", f"{rel}: {res.describe()}", file=rel)]
    if res.timed_out:
        return [Finding(CHECK, "timeout", f"{rel} ({arch}): nvcc {res.describe()}", file=rel)]
    diags = nvcc.parse_diagnostics(res.stderr + "\n" + res.stdout, repo_root)
    errors = [d for d in diags if d.severity == "error"]
    if res.ok:
        return []
    if not errors:
        tail = res.tail(5) or res.tail(5, "stdout")
        return [Finding(CHECK, "compile-error", f"{rel} ({arch}): nvcc failed, {res.describe()}\n{tail}", file=rel)]
    return [
        Finding(CHECK, "compile-error", f"{d.file or rel}:{d.line or '?'}: {d.message} ({arch})",
                file=d.file or rel, line=d.line, details={"arch": arch})
        for d in errors
    ]


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


# --- Triton -----------------------------------------------------------------


def _triton_file(job: Job, repo_root: Path, rel: str, archs: list[str],
                 linted: list[str]) -> tuple[list[Finding], list[KernelResources], int]:
    declared = triton_kernel_names((repo_root / rel).read_text(errors="replace"))
    if not declared:
        return [], [], 0
    try:
        kernels = tritonc.import_kernels(repo_root / rel, repo_root, job.python_path)
    except ImportError as exc:
        if getattr(exc, "name", None) == "triton":
            return [Finding(CHECK, "tool-missing", f"{rel}: triton is not installed; the kernels were not compiled",
                            file=rel)], [], 0
        return [_import_error(rel, exc)], [], 0
    except Exception as exc:  # noqa: BLE001 - the user's module failed to import: that is the finding
        return [_import_error(rel, exc)], [], 0
    findings: list[Finding] = []
    resources: list[KernelResources] = []
    compiled = 0
    given = job.options.get("triton") or {}
    for decl in declared:
        fn = kernels.get(decl.name)
        if fn is None:
            findings.append(Finding(CHECK, "not-compiled", f"{rel}:{decl.line}: Triton kernel {decl.name} is not a "
                                    "module-level name; it was not compiled", Severity.NOTE, file=rel, line=decl.line))
            continue
        f, r, n = _triton_kernel(fn, rel, decl.line, given.get(decl.name), archs, _no_values_severity(job), linted)
        findings += f
        resources += r
        compiled += n
    return findings, resources, compiled


def _import_error(rel: str, exc: BaseException) -> Finding:
    return Finding(CHECK, "import-error", f"{rel}: importing the module failed: {type(exc).__name__}: {exc}", file=rel)


def _no_values_severity(job: Job) -> Severity:
    return Severity.ERROR if job.options.get("no_values") == "fail" else Severity.WARNING


def _triton_kernel(fn: Any, rel: str, line: int, given: dict[str, Any] | None, archs: list[str],
                   no_values: Severity = Severity.WARNING, linted: list[str] | None = None
                   ) -> tuple[list[Finding], list[KernelResources], int]:
    name = fn.fn.__name__
    config = tritonc.config_from_options(fn, given) if given else tritonc.default_config(fn)
    if config.missing:
        need = ", ".join(config.missing)
        msg = (f"{rel}:{line}: Triton kernel {name}: not compiled: no values known for constexpr {need} (no default in "
               f"the kernel, none in checks.compile.triton.{name}.constexprs). On a GPU the equivalence job compiles "
               f"the specializations its cases launch")
        return [Finding(CHECK, NO_VALUES, msg, no_values, file=rel, line=line,
                        details={"kernel": name, "missing": list(config.missing)})], [], 0
    findings: list[Finding] = []
    resources: list[KernelResources] = []
    compiled = 0
    for arch in archs:
        try:
            build = tritonc.compile_kernel(fn, config, arch_number(arch))
        except Exception as exc:  # noqa: BLE001 - Triton raises many types for a compile error
            findings.append(_triton_error(fn, rel, line, arch, config, exc, no_values))
            if config.guessed:
                break  # the same guess fails for every arch: one finding says it
            continue
        compiled += 1
        resources += [_renamed(r, name, arch) for r in build.resources]
        if arch == lint_arch(archs):
            if linted is not None:
                linted += ptxlint.parse(build.ptx)[1]
            findings += compiled_races.triton_findings(fn, build.ptx, rel, arch)
            findings += compiled_offsets.findings_from_ptx(build.ptx, rel, compiled_races.source_root(fn, rel), arch)
    if config.guessed and compiled:
        sig = ", ".join(f"{k}: {v}" for k, v in config.signature.items())
        findings.append(Finding(CHECK, "guessed-signature", f"{rel}:{line}: Triton kernel {name} compiled with a guessed "
                                f"signature ({sig}); set checks.compile.triton.{name}.signature to pin it",
                                Severity.NOTE, file=rel, line=line))
    return findings, resources, compiled


def _renamed(r: KernelResources, name: str, arch: str) -> KernelResources:
    return KernelResources(name, r.symbol, arch, r.registers, r.spill_store, r.spill_load, r.local_bytes,
                           r.shared_bytes, r.constant_bytes, r.barriers)


def _triton_error(fn: Any, rel: str, line: int, arch: str, config: tritonc.TritonConfig, exc: Exception,
                  no_values: Severity = Severity.WARNING) -> Finding:
    name = fn.fn.__name__
    text = str(exc).strip().splitlines()
    first = _triton_message(exc)
    err_line = _triton_error_line(exc, line)
    if config.guessed:
        # A guess of the argument types is gpu-gate's, not the kernel's: the kernel's types are unknown.
        msg = (f"{rel}:{line}: Triton kernel {name}: not compiled: no values known for its signature (the guessed "
               f"one did not compile: {first}); set checks.compile.triton.{name}.signature. On a GPU the "
               f"equivalence job compiles the specializations its cases launch")
        return Finding(CHECK, NO_VALUES, msg, no_values, file=rel, line=line,
                       details={"arch": arch, "kernel": name, "error": "\n".join(text[-20:])})
    return Finding(CHECK, "compile-error", f"{rel}:{err_line}: Triton kernel {name} does not compile for {arch}: {first}",
                   file=rel, line=err_line, details={"arch": arch, "kernel": name, "error": "\n".join(text[:40])})


def _triton_message(exc: BaseException) -> str:
    """The error itself. Triton's message is a source excerpt with a caret under the offending
    node, then the error; where it ends at the caret, the error is the exception's cause."""
    lines = [t.strip() for t in str(exc).strip().splitlines() if t.strip()]
    if lines and not set(lines[-1]) <= set("^~ "):
        return lines[-1]
    if exc.__cause__ is not None:
        return _triton_message(exc.__cause__)
    return type(exc).__name__


def _triton_error_line(exc: Exception, def_line: int) -> int:
    """Triton's CompilationError carries the offending AST node, numbered from the ``def`` line."""
    lineno = getattr(getattr(exc, "node", None), "lineno", None)
    return def_line + lineno - 1 if isinstance(lineno, int) and lineno > 0 else def_line
