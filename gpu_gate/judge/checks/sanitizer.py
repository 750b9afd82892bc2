"""memcheck, racecheck, synccheck, initcheck: the candidate's worker run under compute-sanitizer.

The executor calls :func:`wrap` for compute-sanitizer's command line, runs the worker's sandbox
under it (the tool outside, the worker inside), then calls :func:`collect` with the result.
Inside the wrapped worker the judge has it call :func:`run` (a few small cases).

Options (``job.options``, from the policy):
    path: str | None           compute-sanitizer to use (else CUDA_HOME, PATH, /usr/local/cuda, the pip wheel)
    kernel_names: [str]        kernels to check (default: parsed from the covered files)
    cases: 3                   how many cases run under the tool
    print_limit: 100, launch_timeout: 60
    leak_check: false          memcheck --leak-check full
    racecheck_report: "analysis"
"""
from __future__ import annotations

import dataclasses
import json
import re
import shutil
from pathlib import Path
from typing import Any

from ...cuda import sanitizer as cs
from ...cuda.names import kernel_names_in_file
from ...cuda.tool_launch import tool_options
from .outcome import BaseRun, Context, Outcome, WrapContext, make_outcome
from ...findings import Finding, Severity, Status
from ...protocol.jobs import Job
from ...proc import ProcResult

NO_GPU = "no GPU: compute-sanitizer needs a CUDA device"
_LEVELS = {"error": Severity.ERROR, "warning": Severity.WARNING}
_ADDRESS = re.compile(r"0x[0-9a-fA-F]+")


# --- inside the wrapped worker -----------------------------------------------------


def run(job: Job, ctx: Context) -> Outcome:
    """Run a few equivalence cases of the spec, with memory pools off, under the tool.

    Assumes ``gpu_gate.judge.checks.equivalence.run(job, ctx)`` honours ``options["cases"]``.
    """
    try:
        from ...cuda import disable_pools

        disable_pools()
    except ImportError:
        pass  # no CuPy: its pools cannot hide anything
    try:
        from . import equivalence
    except ImportError:
        return make_outcome(Status.ERROR, reason="the equivalence engine is not available to drive the cases")
    from ...protocol.jobs import BASE_SPEC, DIFFERENTIAL

    # The equivalence settings drive the cases; the spec the base's policy judges by, and the base
    # whose code runs the same cases under the same tool, stay the job's.
    carried = {k: job.options[k] for k in (BASE_SPEC, DIFFERENTIAL) if k in job.options}
    options = {**job.options.get("equivalence", {}), **carried, "cases": int(job.options.get("cases", 3)),
               "sanitizer": job.check}
    return equivalence.run(dataclasses.replace(job, options=options), ctx)


# --- in the executor ----------------------------------------------------------


def has_gpu(ctx: WrapContext | None = None) -> bool:
    known = getattr(ctx, "has_gpu", None)
    if known is not None:
        return bool(known)
    try:
        import pynvml

        pynvml.nvmlInit()
        try:
            return int(pynvml.nvmlDeviceGetCount()) > 0
        finally:
            pynvml.nvmlShutdown()
    except Exception:  # noqa: BLE001 - no driver, no library: no GPU
        return False


def kernel_names(job: Job, repo_root: Path) -> list[str]:
    """Names for ``--kernel-name kns=``: the policy's, else every kernel in the covered files."""
    given = job.options.get("kernel_names")
    if given:
        return sorted(set(map(str, given)))
    names: set[str] = set()
    for rel in job.kernels:
        path = repo_root / rel
        if path.is_file():
            names.update(k.name for k in kernel_names_in_file(rel, path.read_text(errors="replace")))
    return sorted(names)


def wrap(job: Job, workdir: Path, ctx: WrapContext) -> list[str] | Outcome:
    """compute-sanitizer's command line, to which the executor appends the worker's sandbox and the
    worker (see :func:`gpu_gate.executor.sandbox.wrap`), or an Outcome saying why it cannot run.

    In a bubblewrap sandbox the tool's front end runs outside it: it writes its XML report beside
    ``workdir`` (the worker's own directory), in the job's directory that the sandbox hides, so the
    code under review can neither rewrite the report nor reach the process that writes it and sets
    the exit code. Both keep the worker's directory as ``TMPDIR``: the front end finds its collector
    through it (measured on an H100: given another one, it never connects). In an ``unshare``
    sandbox (``ctx.tool_outside`` false) the tool runs inside, and its report lies in ``workdir``:
    within the worker's reach, which the run's ``sandbox-weak`` warning says."""
    tool = job.check
    if not has_gpu(ctx):
        return make_outcome(Status.NOT_RUN, reason=NO_GPU)
    policy_path = job.options.get("path") or getattr(ctx, "sanitizer_path", None)
    found = cs.locate(policy_path)
    if found is None:
        where = f"at {policy_path}" if policy_path else "in CUDA_HOME, PATH, /usr/local/cuda/bin or the pip wheel"
        msg = (f"compute-sanitizer not found {where}; install the CUDA toolkit or `pip install "
               f"nvidia-cuda-sanitizer-api`, or set checks.{tool}.path")
        return make_outcome(Status.ERROR, [Finding(tool, "tool-missing", msg)], reason="compute-sanitizer not found")
    names = kernel_names(job, Path(ctx.repo_root))
    if not names:
        msg = (f"no kernel names found in {', '.join(job.kernels) or 'the covered files'}; set "
               f"checks.{tool}.kernel_names (an unfiltered run over torch's own kernels does not finish)")
        return make_outcome(Status.ERROR, [Finding(tool, "no-kernel-names", msg)], reason="nothing to filter on")
    outside = getattr(ctx, "tool_outside", True)
    opts = cs.Options(
        tool=tool,
        xml_path=str(xml_file(workdir, tool) if outside else Path(workdir) / f"{tool}.xml"),
        kernels=tuple(names),
        print_limit=int(job.options.get("print_limit", 100)),
        launch_timeout=int(job.options.get("launch_timeout", 60)),
        leak_check=bool(job.options.get("leak_check", False)),
        racecheck_report=str(job.options.get("racecheck_report", "analysis")),
        track_filtered=found.supports("--initcheck-track-filtered-global-memory"),
        extra=tuple(tool_options(found.options, _interpreter_name())),
    )
    Path(workdir).mkdir(parents=True, exist_ok=True)
    _targets_file(workdir, tool).write_text(json.dumps({"kernels": names, "repo_root": str(ctx.repo_root),
                                                        "xml": opts.xml_path}))
    env_prefix = [shutil.which("env") or "env", *(f"{k}={v}" for k, v in cs.sanitizer_env(tool).items())]
    return [*env_prefix, *cs.argv(found.path, opts, ())]


def _interpreter_name() -> str:
    """The worker interpreter's executable name, as the tool sees the process (the workers run
    this interpreter, or a venv's of the same Python, whose link resolves to the same name)."""
    import os
    import sys

    return os.path.basename(os.path.realpath(sys.executable))


def collect(job: Job, workdir: Path, proc: ProcResult, inner: Outcome | None, base: BaseRun | None = None) -> Outcome:
    """Findings from the tool's XML and exit status, merged with the judge's own outcome.

    ``base``: the base's code ran the same cases under the same tool. Each report is then new (the
    base's code has no such report), pre-existing (it has: the repository's debt, which blocks only
    where the policy says ``preexisting: fail``) or fixed (the base has it, the head does not)."""
    tool = job.check
    findings, failures, targets = _read_run(job, workdir, proc)
    if base is not None and not failures:
        findings = _against_base(job, findings, Path(str(targets.get("repo_root") or ".")), base)
    return _merge(tool, findings, failures, inner)


def _read_run(job: Job, workdir: Path, proc: ProcResult) -> tuple[list[Finding], list[Finding], dict[str, object]]:
    """The tool's reports in kernels under test (and a note on the others), the failures that mean
    nothing was checked, and what ``wrap`` recorded."""
    tool = job.check
    failures = tool_failures(tool, proc)
    targets = _read_targets(workdir, tool)
    xml_path = Path(targets["xml"]) if targets.get("xml") else xml_file(workdir, tool)
    records: list[cs.Record] = []
    if xml_path.is_file() and xml_path.stat().st_size:
        try:
            records = cs.parse_xml(xml_path.read_text(errors="replace"))
        except cs.XmlError as exc:
            failures.append(Finding(tool, "unreadable-output", f"compute-sanitizer's XML could not be read: {exc}"))
    elif not failures and proc.returncode not in (0, None):
        failures.append(_crash(tool, proc, "and wrote no XML"))
    records, others = _split_by_kernel(records, targets.get("kernels") or [])
    findings = findings_from_records(tool, records, job, targets.get("repo_root"))
    if others:
        findings.append(_others_note(tool, others))
    if proc.returncode == cs.ERROR_EXITCODE and not records and not others and not failures:
        failures.append(Finding(tool, "unreported-error", "compute-sanitizer exited with its error code but "
                                "reported no error record we could read; output:\n" + _tail(proc)))
    return findings, failures, targets


PRE_EXISTING = "pre-existing (the base's code has the same report on the same cases): "


def _against_base(job: Job, findings: list[Finding], head_root: Path, base: BaseRun) -> list[Finding]:
    """The head's reports marked new or pre-existing, the base's that the head no longer has as
    fixed, and a note on the comparison. A base that could not be checked leaves every report new."""
    from ..equivalence.engine import marked
    from ...protocol.jobs import base_commit

    tool = job.check
    commit = str(base_commit(job) or "the base")[:12]
    at_base, failures, _ = _read_run(job, base.workdir, base.proc)
    errors = [f for f in findings if f.severity is not Severity.NOTE]
    if failures:
        why = failures[0].message.splitlines()[0]
        note = (f"not compared with the base's code ({commit}) under {tool}: {why}; "
                f"every report counts as this change's")
        # the kind says whether the tool failed rather than the base's code (the executor runs such a job again)
        return [marked(f, "new") if f.severity is not Severity.NOTE else f for f in findings] + [
            dataclasses.replace(_note(tool, job, note), details={"base_failure": failures[0].kind})]
    base_errors = [f for f in at_base if f.severity is not Severity.NOTE]
    base_sites = [_site(f, base.root) for f in base_errors]
    head_sites = {id(f): _site(f, head_root) for f in errors}
    out: list[Finding] = []
    for f in findings:
        if id(f) not in head_sites:
            out.append(f)
        elif head_sites[id(f)] in base_sites:
            out.append(marked(dataclasses.replace(f, message=PRE_EXISTING + f.message), "pre-existing"))
        else:
            out.append(marked(f, "new"))
    fixed = [f for f, site in zip(base_errors, base_sites) if site not in head_sites.values()]
    for f in fixed:
        out.append(marked(dataclasses.replace(f, severity=Severity.NOTE, message=f"fixed by this change: the base's "
                                              f"code has this report, the head's does not: {f.message}"), "fixed"))
    new = sum(1 for f in out if f.details.get("change") == "new")
    old = sum(1 for f in out if f.details.get("change") == "pre-existing")
    note = (f"compared with the base's code ({commit}) under {tool} on the same cases: {new} new, {old} "
            f"pre-existing and {len(fixed)} fixed report(s)")
    return out + [_note(tool, job, note)]


def _note(tool: str, job: Job, message: str) -> Finding:
    return Finding(tool, "differential", message, Severity.NOTE, spec=job.spec.id if job.spec else None)


def _site(f: Finding, root: Path) -> tuple[str, object, str | None, tuple[str, str]]:
    """What a report is about, across the base's tree and the head's: its kind, its kernel, and the
    source line it points at, by the line's text, so that lines moved by the change still match (a
    report with no line: its message, addresses aside)."""
    text: str | None = None
    if f.file and f.line:
        try:
            path = Path(f.file) if Path(f.file).is_absolute() else root / f.file
            lines = path.read_text(errors="replace").splitlines()
            text = lines[f.line - 1].strip() if 0 < f.line <= len(lines) else None
        except OSError:
            text = None
    bare = f.message
    if f.details.get("allocation"):  # which allocation, and its size, depend on the case
        bare = bare.replace(f": {f.details['allocation']}", "")
    bare = re.sub(r" at \S+:\d+| \[\d+ times\]$", "", bare)
    where = ("line", text) if text is not None else ("message", _ADDRESS.sub("0x…", bare))
    return f.kind, f.details.get("kernel"), f.file, where


def _beside(workdir: Path, tool: str, what: str) -> Path:
    # Beside the worker's directory, not in it: the executor gives each job a parent directory of
    # its own that the sandbox hides, so no worker can rewrite which kernels are under test or the
    # tool's report.
    return Path(workdir).parent / f"{tool}.{Path(workdir).name}.{what}"


def _targets_file(workdir: Path, tool: str) -> Path:
    return _beside(workdir, tool, "targets.json")


def xml_file(workdir: Path, tool: str) -> Path:
    """Where the tool's XML report of the worker in ``workdir`` is written."""
    return _beside(workdir, tool, "xml")


def _read_targets(workdir: Path, tool: str) -> dict[str, Any]:
    """What ``wrap`` recorded for ``collect``: the kernels under test, the repository root and where
    the tool's report is (beside the worker's directory, out of its reach, where it could be)."""
    path = _targets_file(workdir, tool)
    try:
        return dict(json.loads(path.read_text()))
    except (OSError, ValueError):
        return {}


def _split_by_kernel(records: list[cs.Record], names: list[str]) -> tuple[list[cs.Record], list[cs.Record]]:
    """Records in kernels under test, and the rest (from a run the tool could not filter)."""
    if not names:
        return records, []
    mine = [r for r in records if r.kernel is None or any(n in r.kernel for n in names)]
    return mine, [r for r in records if r not in mine]


def _others_note(tool: str, others: list[cs.Record]) -> Finding:
    kernels = sorted({r.kernel or "?" for r in others})
    msg = f"{len(others)} {tool} report(s) in kernels not under test, ignored: {', '.join(kernels[:10])}"
    return Finding(tool, "other-kernels", msg, Severity.NOTE, details={"kernels": kernels})


def tool_failures(tool: str, proc: ProcResult) -> list[Finding]:
    """Findings for a run that could not check anything (they fail closed)."""
    out_text = proc.stdout + "\n" + proc.stderr
    if proc.not_found:
        return [Finding(tool, "tool-missing", f"compute-sanitizer could not be started: {proc.describe()}")]
    if proc.timed_out:
        return [Finding(tool, "timeout", f"the run under {tool} {proc.describe()}; a kernel may hang, or the "
                        "cases are too large for the tool's slowdown", details={"tail": _tail(proc)})]
    if "Device not supported" in out_text:
        return [Finding(tool, "device-not-supported", f"compute-sanitizer does not support this device: "
                        f"{_line_with(out_text, 'Device not supported')}")]
    if "Target application terminated before first instrumented API call" in out_text:
        return [Finding(tool, "no-cuda", "the run never used CUDA, so nothing was checked")]
    if proc.signal:
        return [_crash(tool, proc, "")]
    return []


def _crash(tool: str, proc: ProcResult, what: str) -> Finding:
    return Finding(tool, "sanitizer-crash", f"compute-sanitizer {proc.describe()} {what}".strip() + "\n" + _tail(proc),
                   details={"returncode": proc.returncode, "signal": proc.signal})


def _tail(proc: ProcResult) -> str:
    return (proc.tail(20) + "\n" + proc.tail(20, "stdout")).strip()


def _line_with(text: str, needle: str) -> str:
    return next((line.strip() for line in text.splitlines() if needle in line), needle)


def finding_kind(record: cs.Record) -> str:
    """A short machine code for a record: ``invalid-global-read``, ``race``, ``barrier-divergence``..."""
    text = record.text.lower()
    if m := re.search(r"(invalid|misaligned) (?:__)?(\w+?)(?:__)? (read|write|atomic)", text):
        return f"{m.group(1)}-{m.group(2)}-{m.group(3)}"
    if "race" in text or record.record_kind in ("Analysis", "Hazard"):
        return "race"
    if "barrier" in text or "divergent" in text or "synccheck" in record.record_kind.lower():
        return "barrier-divergence" if ("divergent" in text or "barrier error" in text) else "sync-error"
    if "uninitialized" in text:
        return "uninitialized-read"
    if "leak" in text or record.record_kind == "Leak":
        return "leak"
    if "unused" in text:
        return "unused-memory"
    if record.record_kind == "Api" or "cuda api" in text or "program hit" in text:
        return "api-error"
    return re.sub(r"[^a-z0-9]+", "-", text)[:40].strip("-") or "sanitizer-error"


def findings_from_records(tool: str, records: list[cs.Record], job: Job | None = None,
                          repo_root: str | None = None) -> list[Finding]:
    """One finding per distinct report; repeats (other threads, other launches) are counted."""
    merged: dict[tuple[str, str | None, str | None, int | None, str, tuple[tuple[str, str], ...]], list[cs.Record]] = {}
    for r in records:
        r = dataclasses.replace(r, file=_relative(r.file, repo_root))
        key = (finding_kind(r), r.kernel, r.file, r.line, _ADDRESS.sub("0x…", r.text), r.extra)
        merged.setdefault(key, []).append(r)
    spec = job.spec.id if job is not None and job.spec else None
    return [_finding(tool, rs, spec) for rs in merged.values()]


def _relative(file: str | None, repo_root: str | None) -> str | None:
    """compute-sanitizer prints absolute paths; findings name repo-relative ones."""
    if not file or not repo_root or not Path(file).is_absolute():
        return file
    try:
        return Path(file).relative_to(Path(repo_root).resolve()).as_posix()
    except ValueError:
        try:
            return Path(file).relative_to(Path(repo_root)).as_posix()
        except ValueError:
            return file


def _finding(tool: str, rs: list[cs.Record], spec: str | None) -> Finding:
    first = rs[0]
    kind = finding_kind(first)
    count = sum(r.count for r in rs)
    where = f" in {first.kernel}" if first.kernel else ""
    loc = f" at {first.file}:{first.line}" if first.file and first.line else ""
    msg = f"{first.text}{where}{loc}"
    if first.allocation:
        msg += f": {first.allocation}"
    if first.extra:
        msg += " (" + "; ".join(f"{role}: {desc}" for role, desc in first.extra) + ")"
    if count > 1:
        msg += f" [{count} times]"
    details: dict[str, object] = {"tool": tool, "kernel": first.kernel, "count": count, "level": first.level,
                               "record_kind": first.record_kind}
    for name in ("thread", "block", "address", "size", "allocation"):
        value = getattr(first, name)
        if value is not None:
            details[name] = list(value) if isinstance(value, tuple) else value
    severity = _LEVELS.get(first.level.lower(), Severity.NOTE)
    return Finding(tool, kind, msg, severity, spec=spec, file=first.file, line=first.line, details=details)


def _merge(tool: str, findings: list[Finding], failures: list[Finding], inner: Outcome | None) -> Outcome:
    inner_findings = list(getattr(inner, "findings", []) or [])
    cases = int(getattr(inner, "cases", 0) or 0)
    all_findings = failures + findings + inner_findings
    if failures:
        return make_outcome(Status.ERROR, all_findings, cases=cases, reason=failures[0].message.splitlines()[0])
    if inner is None:
        lost = Finding(tool, "no-result", "the worker under compute-sanitizer gave no result")
        return make_outcome(Status.ERROR, [lost, *all_findings], reason=lost.message)
    if any(f.severity is Severity.ERROR for f in findings):
        return make_outcome(Status.FAILED, all_findings, cases=cases)
    inner_status = getattr(inner, "status", Status.PASSED)
    return make_outcome(inner_status, all_findings, cases=cases, reason=getattr(inner, "reason", None),
                        extra=getattr(inner, "extra", None))
