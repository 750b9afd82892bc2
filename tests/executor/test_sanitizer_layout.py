"""Under compute-sanitizer the candidate gets tensors with no guard band.

Everywhere else the candidate's inputs and its ``gg.empty`` outputs sit inside guard bands, so
that a write past a tensor's end shows as changed guard bytes. Under compute-sanitizer those
bands would hide exactly what the tool is there to see: a read or write past the end lands in
memory of the same allocation, and memcheck reports nothing. So a sanitizer run hands the
candidate the case's own layouts in storage exactly as large as they need.

The kernel here (plain torch, on the CPU, in a real sandboxed worker) answers correctly only
when its input and output storages are exactly that size, and says so through its result.
"""
from __future__ import annotations

from pathlib import Path

from gpu_gate.executor.options import ExecOptions
from gpu_gate.executor.scheduling import execute
from gpu_gate.findings import JobResult
from gpu_gate.protocol.jobs import Job, SpecRef

KERN = """\
import gpu_gate as gg


def _needed(t):
    if t.numel() == 0:
        return 0
    return (t.storage_offset() + 1 + sum((n - 1) * s for n, s in zip(t.shape, t.stride()))) * t.element_size()


def double(x):
    y = gg.empty_like(x)
    exact = (x.untyped_storage().nbytes() == _needed(x) and x.storage_offset() == 0
             and y.untyped_storage().nbytes() == _needed(y))
    y.copy_(x * (2.0 if exact else 3.0))
    return y
"""

SPEC = """\
import gpu_gate as gg
from lib.kern import double

@gg.spec(dims={"rows": gg.Dim(1, 64), "n": gg.Dim(1, 300)},
         inputs={"x": gg.Tensor(("rows", "n"), dtypes=["float32"])},
         reference=lambda x: x * 2)
def double_gate(x):
    return double(x)
"""


def _run(root: Path, **options: object) -> JobResult:
    (root / "lib").mkdir(parents=True)
    (root / "lib" / "__init__.py").write_text("")
    (root / "lib" / "kern.py").write_text(KERN)
    (root / "gate").mkdir()
    (root / "gate" / "double_gate.py").write_text(SPEC)
    job = Job(id="equivalence:gate/double_gate.py::double_gate", check="equivalence", level="required",
              kernels=(), spec=SpecRef("gate/double_gate.py", "double_gate"),
              options={"cases": 6, "growth": False, "shrink": False, **options})
    (result,) = execute([job], ExecOptions(repo_root=root, gpus=(), timeout_s=180))
    return result


def _wrong(r: JobResult) -> set[str]:
    return {f.kind for f in r.findings if f.kind in ("mismatch", "nan", "nonfinite")}


def test_under_a_sanitizer_the_candidate_gets_storage_of_exactly_its_size(tmp_path: Path) -> None:
    r = _run(tmp_path / "sanitized", sanitizer="memcheck")
    assert r.cases >= 6, r.findings
    assert not _wrong(r), [f.message for f in r.findings]


def test_everywhere_else_the_guard_bands_are_there(tmp_path: Path) -> None:
    """The same kernel without the tool: its tensors live in larger, guarded storage."""
    r = _run(tmp_path / "plain")
    assert "mismatch" in _wrong(r), [f.message for f in r.findings]
