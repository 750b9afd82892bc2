"""The determinism check's contention cases survive a GPU that other gates share: a case that runs
out of GPU memory (the candidate's run, or the float64 reference) is built again at a quarter of
its bytes and run, with a note; a race on it is still named ``nondeterministic``. Before, the
reference's CUDA out-of-memory error was the job's error (a "broken spec"), and the candidate's
was a case silently left out.

Real workers on the CPU: the code under test raises torch's own CUDA out-of-memory error above a
size, as it does on a full GPU."""
from __future__ import annotations

import textwrap
from pathlib import Path

from gpu_gate.findings import JobResult, Severity, Status
from gpu_gate.inprocess import Context
from gpu_gate.judge.job import run_job
from gpu_gate.protocol.jobs import Job, SpecRef

LIMIT = 50_000  # elements: a contention case is built at 2^18 of them here

SPEC = """\
import torch
import gpu_gate as gg
from lib.kern import row_sum


def reference(x):
    if {reference_oom} and x.numel() > {limit}:
        raise torch.cuda.OutOfMemoryError("CUDA out of memory. Tried to allocate 8.00 GiB")
    return x.sum(-1)


@gg.spec(dims={{"rows": gg.Dim(1, 512), "n": gg.Dim(1, 512, reduction=True)}},
         inputs={{"x": gg.Tensor(("rows", "n"), dtypes=["float32"])}},
         reference=reference)
def row_sum_gate(x):
    return row_sum(x)
"""

KERN = """\
import os

import torch


def row_sum(x):
    if {kernel_oom} and x.numel() > {limit}:
        raise torch.cuda.OutOfMemoryError("CUDA out of memory. Tried to allocate 8.00 GiB")
    out = x.double().sum(-1)
    if {racy}:  # a different total on every run, as a race's
        g = torch.Generator().manual_seed(int.from_bytes(os.urandom(4), "little"))
        out = out + 0.5 * torch.rand(out.shape, generator=g, dtype=torch.float64)
    return out.to(x.dtype)
"""


def _run(root: Path, *, reference_oom: bool, kernel_oom: bool, racy: bool) -> JobResult:
    (root / "lib").mkdir(parents=True)
    (root / "lib" / "__init__.py").write_text("")
    (root / "lib" / "kern.py").write_text(KERN.format(kernel_oom=kernel_oom, racy=racy, limit=LIMIT))
    (root / "gate").mkdir()
    (root / "gate" / "rows_gate.py").write_text(textwrap.dedent(SPEC.format(reference_oom=reference_oom, limit=LIMIT)))
    job = Job(id="determinism:gate/rows_gate.py::row_sum_gate", check="determinism", level="required",
              kernels=(), spec=SpecRef("gate/rows_gate.py", "row_sum_gate"), seed=5,
              options={"repeats": 3, "contention": True, "cases": 1})
    return run_job(job, Context(repo_root=root, device="cpu", workdir=root / "work"))


def _notes(r: JobResult) -> list[str]:
    return [f.message for f in r.findings if f.kind == "out-of-memory" and f.severity is Severity.NOTE]


def test_a_race_on_a_contention_case_the_reference_cannot_hold_is_named_at_a_smaller_size(tmp_path: Path) -> None:
    r = _run(tmp_path, reference_oom=True, kernel_oom=False, racy=True)
    assert r.status is Status.FAILED, [f.message for f in r.findings]
    (race,) = [f for f in r.findings if f.kind == "nondeterministic"]
    assert race.case == "k0rows", race.case
    notes = _notes(r)
    assert notes and all("ran out of GPU memory" in n and "run again at" in n for n in notes), notes
    assert not [f for f in r.findings if f.kind == "reference-error"]


def test_a_contention_case_the_candidate_cannot_hold_runs_smaller(tmp_path: Path) -> None:
    r = _run(tmp_path, reference_oom=False, kernel_oom=True, racy=False)
    assert r.status is Status.PASSED, [f.message for f in r.findings]
    notes = _notes(r)
    assert any(n.startswith("contention case k0rows ran out of GPU memory") for n in notes), notes
    sides = [c for c in r.extra.timing["cases"] if c[0] == "k0rows"]
    assert len(sides) >= 2, "the case was run again, smaller, after its first run ran out of memory"
    assert "[rows=512," not in sides[-1][3] and "[rows=512," in sides[0][3], sides


def test_a_case_that_fits_is_run_as_built_with_no_note(tmp_path: Path) -> None:
    r = _run(tmp_path, reference_oom=False, kernel_oom=False, racy=False)
    assert r.status is Status.PASSED and not _notes(r), [f.message for f in r.findings]
    assert [c[0] for c in r.extra.timing["cases"]][:1] == ["k0rows"]
