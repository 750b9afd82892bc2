"""gpu-gate inside a library's own test suite: ``gg.check(spec)`` and what the pytest plugin runs.

The same engine as ``gpu-gate check``, with the repository's policy (its cases, tolerance, dims and
dtypes), run in the calling process: the spec's candidate and reference are the library's own
trusted code here, so there is no judge/worker split and no sandbox (see docs/trust.md, "In one
process"). A merge gate runs ``gpu-gate check``; this is for the developer's loop.
"""
from __future__ import annotations

import os
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from .findings import Finding, JobResult, Severity, Status
from .judge.checks import CHECKS

# what runs with its workers in this process: the checks under a tool wrap a process of their own
IN_PROCESS_CHECKS = tuple(name for name, info in CHECKS.items() if info.in_process)


class GateCheckFailed(AssertionError):
    """A spec failed its checks; the message lists the blocking findings with their repro commands."""

    def __init__(self, results: list[JobResult]) -> None:
        self.results = results
        super().__init__(describe_failures(results))


def repo_root_for(path: Path) -> Path:
    """The repository a spec file belongs to: the nearest directory with a policy file or a ``.git``."""
    from .policy import POLICY_NAMES

    for d in [path.parent, *path.parent.parents]:
        if (d / ".git").exists() or any((d / n).is_file() for n in POLICY_NAMES):
            return d
    return path.parent


def interpret_without_gpu() -> str | None:
    """Where no GPU is usable and ``TRITON_INTERPRET`` is not set, set it (this process and its children
    run Triton kernels under Triton's interpreter, as ``gpu-gate check`` does without a GPU); the line
    that says so, or None. Triton reads it when a kernel is defined, so call this before the library
    is imported."""
    from .judge.job import pick_device

    if os.environ.get("TRITON_INTERPRET") is not None or pick_device() == "cuda":
        return None
    os.environ["TRITON_INTERPRET"] = "1"
    return "gpu-gate: no GPU here: Triton kernels run under Triton's interpreter (TRITON_INTERPRET=1)"


def job_for(root: Path, file: str, name: str, check: str, *, policy: Any = None, cases: int | None = None,
            seed: int | None = None) -> Any:
    """The job ``gpu-gate check`` would run for this spec and check, from the repository's policy."""
    from .protocol.jobs import Job, SpecRef
    from .plan import _options
    from .policy import load_policy
    from .pythonpath import python_path

    if check not in IN_PROCESS_CHECKS:
        raise ValueError(f"check {check!r} cannot run in this process; choose from {', '.join(IN_PROCESS_CHECKS)}")
    policy = policy if policy is not None else load_policy(root).policy
    chk = policy.check(check)
    opts = dict(_options(policy, check, chk))
    opts.pop("compile", None)  # compiling the launched specializations is the gate's business
    if cases is not None:
        opts["cases"] = cases
    pyproject = root / "pyproject.toml"
    pp = python_path(pyproject.read_bytes() if pyproject.is_file() else None, policy.python_path)
    fixed = policy.checks.equivalence.seed
    return Job(id=f"{check}:{file}::{name}", check=check, level="required", kernels=(), spec=SpecRef(file, name),
               options=opts, seed=int(seed if seed is not None else fixed if fixed is not None else 0),
               python_path=pp)


def run(root: Path, file: str, name: str, check: str, *, device: str | None = None, **kw: Any) -> JobResult:
    from .inprocess import Context
    from .judge.job import pick_device, run_job

    from .checked import in_ci
    from .local_loop import adapt

    device = device or pick_device()
    # as `gpu-gate check` runs it here: stopping at red outside CI, the CPU's budget (see local_loop)
    (job,), _ = adapt([job_for(root, file, name, check, **kw)], gpu=device == "cuda", ci=in_ci())
    with tempfile.TemporaryDirectory(prefix="gate-") as tmp:
        ctx = Context(repo_root=root, device=device, workdir=Path(tmp))
        return run_job(job, ctx)


def check(spec: Any, *, checks: Sequence[str] = ("equivalence",), cases: int | None = None, seed: int | None = None,
          device: str | None = None) -> list[JobResult]:
    """Run a gate spec's checks from a test: ``gg.check(my_kernel_gate)``. Raises
    :class:`GateCheckFailed` (an ``AssertionError``) when a check fails or could not run; a check
    that was deliberately not run here (a GPU-only spec on the CPU) is returned, not raised."""
    file = Path(getattr(spec, "file", "") or "")
    if not file.is_file():
        raise TypeError("gg.check() takes a gate spec: a function decorated with @gg.spec in a .py file")
    root = repo_root_for(file.resolve())
    rel = os.path.relpath(file.resolve(), root)
    results = [run(root, rel, spec.name, c, device=device, cases=cases, seed=seed) for c in checks]
    if any(failed(r) for r in results):
        raise GateCheckFailed(results)
    return results


def failed(r: JobResult) -> bool:
    return r.status in (Status.FAILED, Status.ERROR)


def blocking(r: JobResult) -> list[Finding]:
    return [f for f in r.findings if f.severity is Severity.ERROR]


def describe_failures(results: list[JobResult]) -> str:
    lines: list[str] = []
    for r in results:
        if not failed(r):
            continue
        lines.append(f"{r.check} {r.status.value} for {r.spec}" + (f": {r.reason}" if r.reason else ""))
        for f in blocking(r):
            lines.append(f"  {f.kind}{f' (case {f.case})' if f.case else ''}: {f.message}")
            if f.repro:
                lines.append(f"  reproduce: {f.repro}")
    return "\n".join(lines)
