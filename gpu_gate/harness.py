"""The job subprocess: ``python -I -m gpu_gate.harness JOB.json RESULT.json``.

It imports the spec module, runs one check and writes a JobResult as JSON. The
executor treats a crash, a signal, a timeout or a missing result file as a
finding, so anything that goes wrong here ends this job only.

The job file carries the job and its context (repository, device, time budget, the
sanitizer wrapping this process): nothing in the environment says gpu-gate is here.
"""
from __future__ import annotations

import dataclasses
import importlib.util
import json
import os
import sys
import time
import traceback
from pathlib import Path
from typing import Any

from .checks import CHECKS
from .findings import Finding, JobResult, Severity, Status
from .jobs import Job


@dataclasses.dataclass
class Context:
    repo_root: Path
    device: str  # "cuda" or "cpu"
    workdir: Path
    sanitizer: str | None = None  # the compute-sanitizer tool wrapping this process, if any
    deadline: float = float("inf")  # time.monotonic() by which the check should wrap up

    @property
    def triton_interpret(self) -> bool:
        return os.environ.get("TRITON_INTERPRET") == "1"


@dataclasses.dataclass
class Outcome:
    status: Status
    findings: list[Finding] = dataclasses.field(default_factory=list)
    cases: int = 0
    reason: str | None = None
    extra: dict[str, Any] = dataclasses.field(default_factory=dict)


class SpecImportError(Exception):
    def __init__(self, finding: Finding) -> None:
        super().__init__(finding.message)
        self.finding = finding


def _module_name(rel: str) -> str:
    stem = rel[:-3] if rel.endswith(".py") else rel
    return "gpu_gate_spec__" + "".join(c if c.isalnum() else "_" for c in stem)


_ROOTS: set[str] = set()


def _forget_other_roots(root: str) -> None:
    """In one process (tests, or a caller that runs jobs in-process), specs of another repository
    must not see its packages: ``kernels`` imported from there would shadow this one's."""
    for other in _ROOTS - {root}:
        prefix = other.rstrip(os.sep) + os.sep
        for name, mod in list(sys.modules.items()):
            if (getattr(mod, "__file__", None) or "").startswith(prefix):
                del sys.modules[name]
        sys.path[:] = [p for p in sys.path if p != other and not p.startswith(prefix)]
    _ROOTS.clear()
    _ROOTS.add(root)


def load_spec(job: Job, ctx: Context) -> Any:
    """Import the spec module in isolation and return the named spec. A spec that exists at the base is
    loaded from the base's source (gpu_gate.rules.judging); the head's file judges only when it cannot."""
    from .rules import judging

    base = judging.base_copy(job, ctx.workdir)
    if base is not None:
        return _load_spec_file(job, ctx, base)
    return _load_spec_file(job, ctx, ctx.repo_root / job.spec.file if job.spec else ctx.repo_root)


def _load_spec_file(job: Job, ctx: Context, path: Path) -> Any:
    from . import launches
    from .spec import specs_in_module

    assert job.spec is not None
    root = str(ctx.repo_root)
    _forget_other_roots(root)
    # The user's packages import as they do in their own tests: from the policy's python_path
    # (a src/ layout's package directory), then the root.
    user_path(ctx.repo_root, job.python_path)
    name = _module_name(job.spec.file)
    try:
        spec_obj = importlib.util.spec_from_file_location(name, path)
        if spec_obj is None or spec_obj.loader is None:
            raise ImportError(f"cannot load {path}")
        module = importlib.util.module_from_spec(spec_obj)
        sys.modules[name] = module
        spec_obj.loader.exec_module(module)
        launches.ensure_hooked()
    except BaseException as exc:  # noqa: BLE001 - user code: any failure is a finding
        if isinstance(exc, KeyboardInterrupt):
            raise
        tb = traceback.format_exc()
        line = _user_line(tb, job.spec.file)
        raise SpecImportError(Finding(
            check=job.check, kind="spec-import-error", spec=job.spec.id, file=job.spec.file, line=line,
            message=f"{job.spec.file}:{line or 1}: the spec does not import: {type(exc).__name__}: {exc} "
                    f"({_import_hint(exc, job)})",
            details={"traceback": tb})) from exc
    found = [s for s in specs_in_module(name) if s.name == job.spec.name]
    if not found:
        names = [s.name for s in specs_in_module(name)]
        raise SpecImportError(Finding(
            check=job.check, kind="spec-not-found", spec=job.spec.id, file=job.spec.file,
            message=f"{job.spec.file}: no gate spec named {job.spec.name!r} (found: {', '.join(names) or 'none'}; "
                    f"decorate the function with @gg.spec)"))
    return found[0]


def _import_hint(exc: BaseException, job: Job) -> str:
    if isinstance(exc, ModuleNotFoundError):
        where = ", ".join(repr(p or ".") for p in job.python_path)
        return (f"specs import the repository's packages from python_path [{where}]: if the package lives "
                f"elsewhere, e.g. in src/, set `python_path: [src]` in .gpu-gate.yml; if it is a dependency, "
                f"install it on the runner")
    assert job.spec is not None
    return f"fix the spec module; run `python {job.spec.file}` to see the error"


# What the judging side imports from site-packages: imported before the repository is on
# sys.path, so that a repository file of the same name (``torch.py``) cannot stand in for it.
_JUDGE_IMPORTS = ("torch", "numpy")


def user_path(repo_root: Path, python_path: tuple[str, ...] = ("",)) -> None:
    """Put the repository (and the entries of $PYTHONPATH, which ``python -I`` ignores) on
    sys.path so the user's packages import as in their own tests, but behind the standard
    library: a repository ``json.py`` never replaces the stdlib's. They go ahead of
    site-packages, so the pull request's own package wins over an installed copy of it, and
    torch and numpy are imported first, so that a repository ``torch.py`` finds them taken.
    ``gpu_gate`` itself was imported before any of this. ``python_path``: the policy's
    repository-relative directories, in order ("" is the root)."""
    for name in _JUDGE_IMPORTS:
        try:
            __import__(name)
        except ImportError:
            pass
    extra = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    wanted = [str(repo_root / rel) if rel else str(repo_root) for rel in (python_path or ("",))]
    wanted += [str((repo_root / p).resolve()) for p in extra]
    at = _first_site_index()
    for entry in wanted:
        if entry not in sys.path:
            sys.path.insert(at, entry)
            at += 1


def _first_site_index() -> int:
    """Where site-packages begin on sys.path (its end where there are none)."""
    import site
    import sysconfig

    sites = {os.path.realpath(p) for p in (*site.getsitepackages(), sysconfig.get_paths()["purelib"],
                                           sysconfig.get_paths()["platlib"])}
    for i, entry in enumerate(sys.path):
        if os.path.realpath(entry or ".") in sites or "site-packages" in entry or "dist-packages" in entry:
            return i
    return len(sys.path)


def _user_line(tb: str, rel: str) -> int | None:
    line = None
    for text in tb.splitlines():
        text = text.strip()
        if text.startswith("File ") and rel.replace(os.sep, "/") in text.replace(os.sep, "/"):
            try:
                line = int(text.split(", line ")[1].split(",")[0])
            except (IndexError, ValueError):
                pass
    return line


def pick_device() -> str:
    try:
        import torch
    except ImportError:
        return "cpu"
    return "cuda" if torch.cuda.is_available() else "cpu"


def _run_check(info: Any, job: Job, ctx: Context) -> Outcome:
    try:
        outcome: Outcome = info.load().run(job, ctx)
    except SpecImportError as exc:
        outcome = Outcome(Status.ERROR, [exc.finding], reason=exc.finding.message.split(" (")[0])
    return outcome


def run_job(job: Job, ctx: Context) -> JobResult:
    from . import launches
    from .rules import judging

    start = time.monotonic()
    info = CHECKS[job.check]
    with launches.recording(ctx.repo_root) as launched:
        outcome = _run_check(info, job, ctx)
        why = judging.signature_broke(job, outcome.findings)
        if why is not None:  # the base's spec no longer fits the head: the head's judges, and the job says so
            outcome = _run_check(info, judging.without_base(job), ctx)
            outcome.findings.append(judging.fallback_finding(job, why))
            if outcome.status is Status.PASSED and any(f.severity is Severity.ERROR for f in outcome.findings):
                outcome.status = Status.FAILED
    if job.spec is not None and outcome.status in (Status.PASSED, Status.FAILED):
        # What the spec really launched: the judge's coverage map (gpu_gate.coverage).
        outcome.extra["launches"] = launched.to_json()
    return JobResult(
        job_id=job.id, check=job.check, status=outcome.status, level=job.level,
        spec=job.spec.id if job.spec else None, kernels=job.kernels, findings=outcome.findings,
        duration_s=time.monotonic() - start, cases=outcome.cases, reason=outcome.reason, extra=outcome.extra)


def read_job(path: Path) -> tuple[Job, dict[str, Any]]:
    """The job and its context from the executor's job file ``{"job": ..., "context": ...}``.
    A bare job (written by hand) takes its context from the GPU_GATE_* variables, or defaults."""
    data = json.loads(path.read_text())
    if "job" in data:
        return Job.from_json(data["job"]), dict(data.get("context") or {})
    env = os.environ
    return Job.from_json(data), {"repo_root": env.get("GPU_GATE_REPO_ROOT"), "device": env.get("GPU_GATE_DEVICE"),
                                 "budget_s": env.get("GPU_GATE_JOB_BUDGET_S"), "sanitizer": env.get("GPU_GATE_SANITIZER")}


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if len(argv) != 2:
        print("usage: python -m gpu_gate.harness JOB.json RESULT.json", file=sys.stderr)
        return 2
    job, context = read_job(Path(argv[0]))
    out = Path(argv[1])
    repo = Path(context.get("repo_root") or os.getcwd())
    budget = float(context.get("budget_s") or "inf")
    ctx = Context(repo_root=repo, device=context.get("device") or pick_device(), workdir=out.parent,
                  sanitizer=context.get("sanitizer") or None, deadline=time.monotonic() + budget)
    try:
        result = run_job(job, ctx)
    except Exception as exc:  # noqa: BLE001 - report, do not lose the job
        result = JobResult(job_id=job.id, check=job.check, status=Status.ERROR, level=job.level,
                           spec=job.spec.id if job.spec else None, kernels=job.kernels,
                           reason=f"internal error in gpu-gate: {type(exc).__name__}: {exc}",
                           findings=[Finding(check=job.check, kind="internal-error", severity=Severity.ERROR,
                                             spec=job.spec.id if job.spec else None,
                                             message=f"internal error in gpu-gate ({type(exc).__name__}: {exc}); "
                                                     f"if you see this, please report it",
                                             details={"traceback": traceback.format_exc()})])
    tmp = out.with_suffix(".tmp")
    tmp.write_text(json.dumps(result.to_json()))
    os.replace(tmp, out)
    return 0


if __name__ == "__main__":
    # Run through the importable module, not __main__, so the exception classes the
    # checks raise are the same objects this module catches.
    from gpu_gate.harness import main as _main

    sys.exit(_main())
