"""The determinism check judged against the base's code, on the CPU (real
sandboxed workers through the executor, the base's in a tree of its own). The head's runs of a
case differ; the base's code runs the same case:

- the base differs too: the repository's debt (pre-existing);
- the base's runs agree and are accurate: this change's (new), and it blocks;
- the base's runs agree but are as far off the reference as the head's (within the policy's
  regression_factor): no run of this change is less accurate than the base's code there, as the
  equivalence check judges accuracy against the base; debt, not this change's. On an H100,
  Liger-Kernel's fused linear JSD fix (#330) was red for exactly this: its bf16 weight gradient,
  unstable at the base as well, varied on a case where the base's buggy code was consistently far
  off.
"""
from __future__ import annotations

from pathlib import Path

from gpu_gate.executor.options import ExecOptions
from gpu_gate.executor.scheduling import execute
from gpu_gate.protocol.jobs import Job, SpecRef
from gpu_gate.protocol.jobs import DIFFERENTIAL

EXACT = "def row_sum(x):\n    return x.double().sum(-1).to(x.dtype)\n"
# consistently off the reference by 0.5: the same wrong answer on every run
BIASED = "def row_sum(x):\n    return (x.double().sum(-1) + 0.5).to(x.dtype)\n"
# off by a different amount on every run (what a race, or atomics, do): up to LOW, or by HIGH and more
NOISY = """\
import os

import torch


def row_sum(x):
    g = torch.Generator().manual_seed(int.from_bytes(os.urandom(4), "little"))
    noise = torch.rand(x.shape[:-1], generator=g, dtype=torch.float64)
    return (x.double().sum(-1) + {low} + {span} * noise).to(x.dtype)
"""
WITHIN = NOISY.format(low=0.0, span=0.5)  # at most 0.5 off: within 4 x the biased base's 0.5
BEYOND = NOISY.format(low=3.0, span=1.0)  # at least 3 off: more than 4 x 0.5

SPEC = """\
import torch
import gpu_gate as gg
from mylib.ops import row_sum


@gg.spec(dims={"rows": gg.Dim(1, 16), "n": gg.Dim(1, 64)},
         inputs={"x": gg.Tensor(("rows", "n"), dtypes=["float32"])},
         reference=lambda x: x.sum(-1),
         devices=["cuda", "cpu"])
def row_sum_gate(x):
    return row_sum(x)
"""


# the same, where the spec promises bitwise-identical runs: any difference is the change's defect
DETERMINISTIC_SPEC = SPEC.replace("reference=lambda x: x.sum(-1),", "reference=lambda x: x.sum(-1), deterministic=True,")


def _tree(root: Path, ops: str, spec: str = SPEC) -> Path:
    (root / "mylib").mkdir(parents=True)
    (root / "mylib" / "__init__.py").write_text("")
    (root / "mylib" / "ops.py").write_text(ops)
    (root / "gate").mkdir()
    (root / "gate" / "rows_gate.py").write_text(spec)
    return root


def _run(tmp: Path, base_ops: str, head_ops: str, spec: str = SPEC) -> list[dict]:  # type: ignore[type-arg]
    """The determinism job of a pull request whose base has ``base_ops``: its nondeterministic findings."""
    import dataclasses

    from gpu_gate.executor import job as executor

    # The executor runs determinism on a GPU only; the check itself runs on the CPU too (see
    # tests/judge/test_determinism_tally.py), with its repeats alone.
    checks = dict(executor.CHECKS)
    checks["determinism"] = dataclasses.replace(checks["determinism"], needs_gpu=False)
    saved, executor.CHECKS = executor.CHECKS, checks  # type: ignore[assignment]
    try:
        return _execute(tmp, base_ops, head_ops, spec)
    finally:
        executor.CHECKS = saved


def _execute(tmp: Path, base_ops: str, head_ops: str, spec: str) -> list[dict]:  # type: ignore[type-arg]
    head, base = _tree(tmp / "head", head_ops, spec), _tree(tmp / "base", base_ops, spec)
    job = Job(id="determinism:gate/rows_gate.py::row_sum_gate", check="determinism", level="required",
              kernels=(), spec=SpecRef("gate/rows_gate.py", "row_sum_gate"), seed=7,
              options={"repeats": 3, "contention": False, DIFFERENTIAL: "b" * 40})
    (tmp / "work").mkdir()
    [result] = execute([job], ExecOptions(repo_root=head, base_root=base, gpus=(), timeout_s=300,
                                          work_root=tmp / "work"))
    return [f.to_json() for f in result.findings if f.kind == "nondeterministic"]


def test_runs_that_differ_where_the_base_is_exact_are_new(tmp_path: Path) -> None:
    found = _run(tmp_path, EXACT, WITHIN)
    assert found and {f["details"]["change"] for f in found} == {"new"}, found
    # named a race with the base's spread beside it: none, on the same inputs in the same settings
    f = found[0]
    assert "the base's code, repeated 4 times on the same inputs in the same settings, gave the same output every " \
           "time" in f["message"], f["message"]
    assert f["details"]["base_spread"] == 0.0 and f["details"]["base_error_of"]["out"] < 1e-5, f["details"]


def test_runs_within_the_bases_own_error_on_the_case_are_debt(tmp_path: Path) -> None:
    found = _run(tmp_path, BIASED, WITHIN)
    assert found and {f["details"]["change"] for f in found} == {"pre-existing"}, found
    f = found[0]
    assert "within the base's own error on the same case" in f["message"], f["message"]
    assert 0.45 < f["details"]["base_error_of"]["out"] < 0.55
    assert f["details"]["worst_error_of"]["out"] <= 4 * f["details"]["base_error_of"]["out"]


def test_runs_further_off_than_the_bases_error_allows_are_new(tmp_path: Path) -> None:
    found = _run(tmp_path, BIASED, BEYOND)
    assert found and {f["details"]["change"] for f in found} == {"new"}, found


def test_a_spec_that_promises_identical_runs_gets_no_allowance(tmp_path: Path) -> None:
    """deterministic=True: runs that differ at all are the change's, however far off the base is."""
    found = _run(tmp_path, BIASED, WITHIN, DETERMINISTIC_SPEC)
    assert found and {f["details"]["change"] for f in found} == {"new"}, found
    assert "deterministic=True" in found[0]["message"]


# issue 40, the magnitude rule: the base's code is nondeterministic on the case too; runs that
# spread far wider than the base's are this change's doing, runs that spread as wide are its debt
# (a run counter, not chance: every other run is off by ``span``, so that the spreads compared are known)
ALTERNATING = """\
import torch

_runs = [0]


def row_sum(x):
    _runs[0] += 1
    return (x.double().sum(-1) + {span} * (_runs[0] % 2)).to(x.dtype)
"""


def test_runs_that_spread_far_wider_than_the_nondeterministic_bases_are_new(tmp_path: Path) -> None:
    found = _run(tmp_path, ALTERNATING.format(span=0.5), ALTERNATING.format(span=50.0))
    assert found and {f["details"]["change"] for f in found} == {"new"}, found
    f = found[0]
    assert "spread more than 4x as far as the base's" in f["message"], f["message"]
    assert 49.9 < f["details"]["spread_of"]["out"] < 50.1 and 0.49 < f["details"]["base_spread_of"]["out"] < 0.51


def test_runs_that_spread_as_wide_as_the_nondeterministic_bases_are_debt(tmp_path: Path) -> None:
    """The twin: the head's code varies as the base's does (a change that leaves the kernel as it was)."""
    found = _run(tmp_path, ALTERNATING.format(span=0.5), ALTERNATING.format(span=0.5).replace("_runs", "_calls"))
    assert found and {f["details"]["change"] for f in found} == {"pre-existing"}, found
    assert "nondeterministic on the same case too" in found[0]["message"]
