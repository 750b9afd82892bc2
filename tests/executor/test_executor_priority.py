"""CPU priority: on each GPU, the job that starts first (the longest, as the jobs are ordered) runs
at full priority; the jobs beside it yield the cores to it, so that the job that ends last is not
slowed by those that end before it."""
from __future__ import annotations

import os
import subprocess
import threading
import time
from pathlib import Path

import pytest

from gpu_gate.executor import argv, options, scheduling
from gpu_gate.findings import JobResult, Status
from gpu_gate.protocol.jobs import Job


def _job(name: str, cost: float, check: str = "equivalence") -> Job:
    return Job(id=name, check=check, level="required", kernels=(), cost=cost)


def test_the_longest_job_of_each_gpu_leads_and_the_rest_yield(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    seen: dict[str, tuple[str | None, int]] = {}
    lock = threading.Lock()

    def fake_run(job: Job, opts: options.ExecOptions, gpu: str | None, control: object = None) -> JobResult:
        with lock:
            seen[job.id] = (gpu, opts.nice)
        time.sleep(0.3)  # the jobs of a GPU overlap
        return JobResult(job_id=job.id, check=job.check, level=job.level, status=Status.PASSED)

    monkeypatch.setattr(scheduling, "run_one", fake_run)
    jobs = [_job("short-a", 1), _job("long", 9), _job("short-b", 2), _job("long-2", 8), _job("short-c", 1)]
    opts = options.ExecOptions(repo_root=tmp_path, gpus=("0", "1"), jobs_per_gpu=3, pycache=tmp_path,
                                free_memory=lambda gpu: 1 << 40, sandbox_mode="off")
    results = scheduling.execute(jobs, opts)
    assert {r.status for r in results} == {Status.PASSED}
    leads = {job for job, (_, nice) in seen.items() if nice == 0}
    # one lead per GPU, the longest job among them (the first taken); every job beside them yields
    assert "long" in leads and len(leads) == 2, seen
    assert sorted(gpu for job, (gpu, _) in seen.items() if job in leads) == ["0", "1"], seen
    assert all(nice == options.LESS_URGENT for job, (_, nice) in seen.items() if job not in leads), seen


def test_a_job_that_runs_alone_on_its_gpu_leads(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    seen: list[int] = []

    def fake_run(job: Job, opts: options.ExecOptions, gpu: str | None, control: object = None) -> JobResult:
        seen.append(opts.nice)
        return JobResult(job_id=job.id, check=job.check, level=job.level, status=Status.PASSED)

    monkeypatch.setattr(scheduling, "run_one", fake_run)
    opts = options.ExecOptions(repo_root=tmp_path, gpus=("0",), jobs_per_gpu=1, pycache=tmp_path,
                                free_memory=lambda gpu: 1 << 40, sandbox_mode="off")
    scheduling.execute([_job("a", 3), _job("b", 2), _job("c", 1)], opts)
    assert seen == [0, 0, 0], "one job at a time: each leads in turn"


def test_a_yielding_jobs_processes_run_at_the_lower_priority(tmp_path: Path) -> None:
    """The priority reaches the process itself (and, through the sandbox, the processes it starts)."""
    opts = options.ExecOptions(repo_root=tmp_path, gpus=(), nice=options.LESS_URGENT)
    niced = argv._niced(["python3", "-c", "import os; print(os.nice(0))"], opts)
    out = subprocess.run(niced, capture_output=True, text=True, check=True).stdout.strip()
    assert int(out) == os.nice(0) + options.LESS_URGENT or int(out) == 19
    lead = argv._niced(["true"], options.ExecOptions(repo_root=tmp_path, gpus=()))
    assert lead == ["true"]
