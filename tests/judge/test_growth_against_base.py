"""Error growth judged against the base's code (a pull request), on the CPU with real sandboxed
workers through the executor, the base's in a tree of its own.

The planted regression is weak: a row sum whose running total, added chunk after chunk of 8192
columns, is now kept in float32 where the base's code sums in float64. At the longest length the
sweep reaches within the CPU's case budget (2^16 of 16 rows) it is at most 1.5x torch's error, so every single case passes the 2x rule and the
4x regression factor, and the sweep's comparison with torch (whose own error grows too) stays
silent; but on the same inputs the base's error is flat and the head's grows. Its correct twin
keeps the running total in float64, as accurate as the base's code."""
from __future__ import annotations

import os
from pathlib import Path

import pytest

from gpu_gate.executor.options import ExecOptions
from gpu_gate.executor.scheduling import execute
from gpu_gate.findings import JobResult, Severity
from gpu_gate.protocol.jobs import DIFFERENTIAL, Job, SpecRef

SEEDS = range(int(os.environ.get("GG_CORPUS_SEED0", "0")), int(os.environ.get("GG_CORPUS_SEED0", "0")) + 5)

BASE = "def row_sum(x):\n    return x.double().sum(-1).to(x.dtype)\n"
CHUNKED = """\
import torch

CHUNK = 8192


def row_sum(x):
    rows, n = x.shape
    c = min(CHUNK, n)
    parts = torch.nn.functional.pad(x.double(), (0, (-n) % c)).reshape(rows, -1, c).sum(-1)
    acc = torch.zeros(rows, dtype=torch.{acc}, device=x.device)
    for j in range(parts.shape[1]):
        acc = acc + parts[:, j].to(acc.dtype)  # the running total, one chunk after another
    return acc.to(x.dtype)
"""
WEAK = CHUNKED.format(acc="float32")  # the regression: the running total rounds to float32 at every chunk
TWIN = CHUNKED.format(acc="float64")  # the same chunks, the running total in float64: as the base

SPEC = """\
import torch
import gpu_gate as gg
from mylib.ops import row_sum


@gg.spec(dims={"rows": gg.Dim(16, 16), "n": gg.Dim(1, 1 << 18, reduction=True)},
         inputs={"x": gg.Tensor(("rows", "n"), dtypes=["float32"], dists=["uniform_pos", "normal"])},
         reference=lambda x: x.sum(-1),
         devices=["cuda", "cpu"])
def row_sum_gate(x):
    return row_sum(x)
"""


def _tree(root: Path, ops: str) -> Path:
    (root / "mylib").mkdir(parents=True)
    (root / "mylib" / "__init__.py").write_text("")
    (root / "mylib" / "ops.py").write_text(ops)
    (root / "gate").mkdir()
    (root / "gate" / "rows_gate.py").write_text(SPEC)
    return root


def run_pr(tmp: Path, base_ops: str, head_ops: str, seed: int, *, differential: bool = True,
           gpus: tuple[str, ...] = (), **more: object) -> JobResult:
    """The equivalence job of a pull request whose base has ``base_ops`` and whose head has ``head_ops``."""
    head, base = _tree(tmp / "head", head_ops), _tree(tmp / "base", base_ops)
    options: dict[str, object] = {"cases": 4, "shrink": False, "seed": seed, **more}
    if differential:
        options[DIFFERENTIAL] = "b" * 40
    job = Job(id="equivalence:gate/rows_gate.py::row_sum_gate", check="equivalence", level="required", kernels=(),
              spec=SpecRef("gate/rows_gate.py", "row_sum_gate"), seed=seed, options=options)
    (tmp / "work").mkdir()
    [result] = execute([job], ExecOptions(repo_root=head, base_root=base, gpus=gpus, timeout_s=600,
                                          work_root=tmp / "work"))
    return result


def _errors(r: JobResult) -> list[tuple[str, str]]:
    return [(f.kind, f.message) for f in r.findings if f.severity is Severity.ERROR]


def _curves(r: JobResult) -> list[dict]:  # type: ignore[type-arg]
    g = r.extra.growth
    return g.get("curves", [g])


@pytest.mark.parametrize("seed", SEEDS)
def test_a_weak_accumulation_that_grows_where_the_base_does_not_is_new_error_growth(seed: int, tmp_path: Path) -> None:
    r = run_pr(tmp_path, BASE, WEAK, seed)
    errors = _errors(r)
    assert "error-growth" in [k for k, _ in errors], errors
    # the sweep's lengths pass one by one; a case of the main schedule may catch the regression too
    # (on some seeds a large-offset case makes it 40x less accurate than the base), never a mismatch
    assert {k for k, _ in errors} <= {"error-growth", "less-accurate"}, errors
    f = next(f for f in r.findings if f.kind == "error-growth")
    assert f.details["change"] == "new" and f.details["against"] == "base", f.details
    assert "faster than the base's code" in f.message
    for curve in _curves(r):
        last = curve["rows"][-1]
        assert last["candidate"] <= 2 * last["baseline"], "at most 2x torch's error at the longest length"
        assert not curve.get("flagged") or curve.get("flagged_against_base"), "torch's comparison alone is silent"


@pytest.mark.parametrize("seed", SEEDS)
def test_the_twin_as_accurate_as_the_base_passes(seed: int, tmp_path: Path) -> None:
    r = run_pr(tmp_path, BASE, TWIN, seed)
    assert r.status.value == "passed" and not _errors(r), _errors(r)
    assert all(not c.get("flagged") for c in _curves(r))


def test_without_the_base_the_weak_accumulation_passes(tmp_path: Path) -> None:
    """Why the base's curve is needed: judged by the absolute rules (no base), every case and the
    comparison with torch's growth let it through."""
    r = run_pr(tmp_path, BASE, WEAK, 0, differential=False)
    assert r.status.value == "passed" and not _errors(r), _errors(r)
