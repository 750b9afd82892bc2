"""A case that does not fit in the GPU's memory is run smaller, never an error: the float64
reference of a determinism job hit CUDA out of memory under load on an H200 (its contention case was
sized from the memory free when the job started). Real workers, on the CPU, with a reference that
raises CUDA's out-of-memory error above a size, as torch does."""
from __future__ import annotations

import textwrap
from pathlib import Path

from gpu_gate.findings import JobResult, Status
from gpu_gate.inprocess import Context
from gpu_gate.judge.checks import fitting
from gpu_gate.judge.job import run_job
from gpu_gate.protocol.jobs import Job, SpecRef

# The reference (the base's truth) runs out of memory on more than LIMIT elements.
SPEC = """\
import torch
import gpu_gate as gg
from lib.kern import double

LIMIT = {limit}

def reference(x):
    if x.numel() > LIMIT:
        raise torch.cuda.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB")
    return x * 2

@gg.spec(dims={{"rows": gg.Dim(1, 4096), "n": gg.Dim(1, 4096)}},
         inputs={{"x": gg.Tensor(("rows", "n"), dtypes=["float32"])}}, reference=reference)
def double_gate(x):
    return double(x)
"""

# Its last bits differ from run to run (as fp32 atomics do), well within tolerance: the check then
# fetches the reference to judge the spread.
HONEST = """\
_calls = [0]

def double(x):
    _calls[0] += 1
    return x * 2 * (1 + 1e-7 * (_calls[0] % 2))
"""


def _run(root: Path, limit: int) -> JobResult:
    (root / "lib").mkdir(parents=True)
    (root / "lib" / "__init__.py").write_text("")
    (root / "lib" / "kern.py").write_text(textwrap.dedent(HONEST))
    (root / "gate").mkdir()
    (root / "gate" / "double_gate.py").write_text(SPEC.format(limit=limit))
    job = Job(id="determinism:gate/double_gate.py::double_gate", check="determinism", level="required",
              kernels=(), spec=SpecRef("gate/double_gate.py", "double_gate"), seed=3,
              options={"repeats": 2, "contention": True, "max_case_bytes": 8 << 20, "cases": 2})
    return run_job(job, Context(repo_root=root, device="cpu", workdir=root / "work"))


def test_a_contention_case_whose_reference_runs_out_of_memory_runs_smaller(tmp_path: Path) -> None:
    r = _run(tmp_path / "a", limit=20_000)
    assert r.status is Status.PASSED, [(f.kind, f.message) for f in r.findings]
    notes = [f.message for f in r.findings if f.kind == "out-of-memory" and f.severity.value == "note"]
    assert notes and "ran out of GPU memory" in notes[0] and "run again at" in notes[0], notes


def test_a_case_that_never_fits_is_left_out_with_a_note_not_an_error(tmp_path: Path) -> None:
    r = _run(tmp_path / "b", limit=0)  # nothing fits: every case is left out, and nothing was checked
    assert r.status is Status.ERROR and r.reason == "no case fit in the GPU's memory left to this job", r.reason
    assert [f.kind for f in r.findings] == ["out-of-memory"] and "was not repeated" in r.findings[0].message


def test_only_out_of_memory_counts() -> None:
    from gpu_gate.judge.workers import SpecBroken

    assert fitting.is_oom(SpecBroken("the reference raised OutOfMemoryError: CUDA out of memory. Tried to ..."))
    assert not fitting.is_oom(SpecBroken("the reference raised ValueError: shapes differ"))
