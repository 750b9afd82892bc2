"""Helpers shared by the GPU corpus tests (Triton and CUDA): run one gate spec of a corpus
through the harness on the GPU, and read the error kinds of its findings."""
from __future__ import annotations

from pathlib import Path

from gpu_gate.findings import JobResult, Severity
from gpu_gate.inprocess import Context
from gpu_gate.judge.job import run_job
from gpu_gate.protocol.jobs import Job, SpecRef


def run(root: Path, name: str, tmp_path: Path, seed: int, check: str = "equivalence",
        **options: object) -> JobResult:
    """Run spec ``name`` of ``root``/gates.py with device "cuda" (24 cases, no shrinking unless
    ``options`` say otherwise)."""
    opts = {"cases": 24, "shrink": False, **options}
    job = Job(id=f"{check}:{name}", check=check, level="required", kernels=(), spec=SpecRef("gates.py", name),
              options=opts, seed=seed)
    return run_job(job, Context(repo_root=root, device="cuda", workdir=tmp_path))


def errors(r: JobResult) -> set[str]:
    return {f.kind for f in r.findings if f.severity is Severity.ERROR}


def not_notes(r: JobResult) -> list[str]:
    """``kind: message`` of every finding that is not a NOTE."""
    return [f"{f.kind}: {f.message}" for f in r.findings if f.severity is not Severity.NOTE]
