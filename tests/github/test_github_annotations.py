"""A blocking finding with no line (an equivalence mismatch) is annotated where a reviewer looks:
the spec's decorator and the definitions of the kernels its job judged."""
from __future__ import annotations

from pathlib import Path

from gpu_gate.findings import Finding, JobResult, Status
from gpu_gate.github.checkrun import check_annotations
from gpu_gate.record import RunRecord
from gpu_gate.verdict import Rules, decide

SPEC = '''import torch
import gpu_gate as gg
from kernels.add import add


@gg.spec(
    dims={"n": gg.Dim(1, 1024)},
    inputs={"x": gg.Tensor(("n",), dtypes=["float32"]), "y": gg.Tensor(("n",), dtype="like:x")},
    reference=lambda x, y: x + y,
)
def add_gate(x, y):
    return add(x, y)
'''
TRITON = '''import triton
import triton.language as tl


def helper():
    pass


@triton.jit
def add_kernel(x_ptr, y_ptr, out_ptr, n, BLOCK: tl.constexpr):
    pass
'''
CUDA = """// scale
#include <cuda_runtime.h>

__global__ void scale(float* o, const float* a, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) o[i] = 2.0f * a[i];
}
"""


def repo(tmp_path: Path) -> Path:
    for rel, text in (("gate/add_gate.py", SPEC), ("kernels/add.py", TRITON), ("csrc/scale.cu", CUDA)):
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text(text)
    return tmp_path


def mismatch(case: str, spec: str = "gate/add_gate.py::add_gate") -> Finding:
    return Finding("equivalence", "mismatch", f"Mismatched elements: 3 / 100 (3.0%) in case {case}", spec=spec,
                   case=case)


def record(*results: JobResult) -> RunRecord:
    return RunRecord(results=list(results), planned_jobs=[r.job_id for r in results])


def test_an_equivalence_failure_is_annotated_at_the_spec_and_each_kernel(tmp_path: Path) -> None:
    root = repo(tmp_path)
    result = JobResult("equivalence:gate/add_gate.py::add_gate", "equivalence", Status.FAILED,
                       spec="gate/add_gate.py::add_gate", kernels=("kernels/add.py", "csrc/scale.cu"),
                       findings=[mismatch("c0001"), mismatch("c0002"), mismatch("c0003")])
    rec = record(result)
    notes = check_annotations(rec, decide(rec, Rules()), root)
    places = {(a["path"], a["start_line"]): a for a in notes}
    assert set(places) == {("gate/add_gate.py", 6), ("kernels/add.py", 9), ("csrc/scale.cu", 4)}
    assert all(a["annotation_level"] == "failure" for a in notes)
    assert places[("kernels/add.py", 9)]["message"].startswith("kernel add_kernel: Mismatched elements: 3 / 100")
    assert "(and 2 more finding(s) of this job" in places[("gate/add_gate.py", 6)]["message"]


def test_a_finding_that_names_its_line_is_annotated_there_only(tmp_path: Path) -> None:
    root = repo(tmp_path)
    placed = Finding("compile", "compile-error", "csrc/scale.cu:5: boom", file="csrc/scale.cu", line=5)
    rec = record(JobResult("compile:csrc/scale.cu", "compile", Status.FAILED, kernels=("csrc/scale.cu",),
                           findings=[placed]))
    assert [(a["path"], a["start_line"]) for a in check_annotations(rec, decide(rec, Rules()), root)] == \
        [("csrc/scale.cu", 5)]


def test_advisory_findings_without_a_line_are_not_spread_over_the_sources(tmp_path: Path) -> None:
    root = repo(tmp_path)
    rec = record(JobResult("determinism:gate/add_gate.py::add_gate", "determinism", Status.FAILED,
                           level="advisory", spec="gate/add_gate.py::add_gate", kernels=("kernels/add.py",),
                           findings=[mismatch("c0001")]))
    assert check_annotations(rec, decide(rec, Rules()), root) == []


def test_a_spec_outside_the_checkout_or_missing_is_not_located(tmp_path: Path) -> None:
    root = repo(tmp_path / "repo")
    (tmp_path / "secret.py").write_text("def add_gate():\n    pass\n")
    rec = record(JobResult("equivalence:x", "equivalence", Status.FAILED, spec="../secret.py::add_gate",
                           kernels=("missing.cu",), findings=[mismatch("c0001", spec="../secret.py::add_gate")]))
    assert check_annotations(rec, decide(rec, Rules()), root) == []


def test_a_publisher_on_another_commit_places_findings_where_the_checked_commit_has_them(tmp_path: Path) -> None:
    """workflow_run: the publisher's checkout is the default branch, where the pull request's lines
    are elsewhere or absent. The places recorded when the jobs ran, from the head's own files,
    travel in results.json; the publisher reads no source of its own for them."""
    from gpu_gate.commands.check import _places

    head = repo(tmp_path / "head")
    result = JobResult("equivalence:gate/add_gate.py::add_gate", "equivalence", Status.FAILED,
                       spec="gate/add_gate.py::add_gate", kernels=("kernels/add.py",), findings=[mismatch("c0001")])
    checked = record(result)
    checked.changed_lines = {"gate/add_gate.py::add_gate": {"kernels/add.py": [[9, 10]]}}
    checked.places = _places(checked, head)
    published = RunRecord.from_json(checked.to_json())  # through results.json
    default_branch = tmp_path / "main"
    for rel, text in (("gate/add_gate.py", "# an older spec\n\n\n" + SPEC), ("kernels/add.py", "\n\n" + TRITON)):
        (default_branch / rel).parent.mkdir(parents=True, exist_ok=True)
        (default_branch / rel).write_text(text)
    notes = check_annotations(published, decide(published, Rules()), default_branch)
    assert [(a["path"], a["start_line"], a["end_line"]) for a in notes] == [
        ("kernels/add.py", 9, 10), ("gate/add_gate.py", 6, 6)], notes
    assert notes[0]["message"].startswith("changed lines 9-10: Mismatched elements")
