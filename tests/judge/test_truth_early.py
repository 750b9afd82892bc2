"""The truth asked for before the head's code runs: the reference worker computes a case's float64
reference while the candidate's worker runs it, for the output dtypes that the head's code returned
on the last case with inputs of the same dtypes. Where the outputs come back in other dtypes, or the
code refuses the case, the early answer is read and dropped, and every later answer still belongs
to its own question."""
from __future__ import annotations

import textwrap
from pathlib import Path
from typing import Any

import pytest

from gpu_gate.findings import JobResult, Severity, Status
from gpu_gate.inprocess import Context
from gpu_gate.judge.job import run_job
from gpu_gate.protocol.jobs import Job, SpecRef

SPEC = """\
import torch
import gpu_gate as gg

@gg.spec(dims={"rows": gg.Dim(1, 32), "n": gg.Dim(1, 300)},
         inputs={"x": gg.Tensor(("rows", "n"), dtypes=["float32", "float16"])},
         reference=lambda x: torch.sin(x) * 2)
def kern(x):
    return KERNEL(x)
"""


def _run(root: Path, kernel: str) -> JobResult:
    root.mkdir()
    (root / "gate_spec.py").write_text(SPEC.replace("KERNEL(x)", "kernel(x)") + textwrap.dedent(kernel))
    job = Job(id="j", check="equivalence", level="required", kernels=(), spec=SpecRef("gate_spec.py", "kern"),
              options={"cases": 16, "shrink": False}, seed=5)
    return run_job(job, Context(repo_root=root, device="cpu", workdir=root))


@pytest.fixture
def asked(monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, Any]]:
    """What the judge asked, in order: each truth (with the dtypes asked for), each call of the
    head's code, and each truth waited for."""
    from gpu_gate.judge import workers

    events: list[tuple[str, Any]] = []
    truth_for, send_call, waited = workers.Reference.truth_for, workers.Candidate._send_call, \
        workers.TruthPending.__call__

    def spy_truth(self: Any, case: Any, dtypes: dict[str, str], salt: int = 0) -> Any:
        events.append(("truth", (case.id, salt, dict(dtypes), dict(case.dims))))
        return truth_for(self, case, dtypes, salt)

    def spy_call(self: Any, case: Any, upstream: Any, **kw: Any) -> None:
        events.append(("call", case.id))
        send_call(self, case, upstream, **kw)

    def spy_wait(self: Any) -> Any:
        events.append(("waited", self.dtypes))
        return waited(self)

    monkeypatch.setattr(workers.Reference, "truth_for", spy_truth)
    monkeypatch.setattr(workers.Candidate, "_send_call", spy_call)
    monkeypatch.setattr(workers.TruthPending, "__call__", spy_wait)
    return events


def _truth_before_first_call(events: list[tuple[str, Any]]) -> set[str]:
    """The cases whose truth was asked for before the head's code first ran them."""
    called: set[str] = set()
    early: set[str] = set()
    for kind, what in events:
        if kind == "call":
            called.add(what)
        elif kind == "truth" and what[1] == 0 and what[0] not in called:
            early.add(what[0])
    return early


def test_the_truth_is_asked_for_while_the_head_runs_and_a_correct_kernel_passes(
        tmp_path: Path, asked: list[tuple[str, Any]]) -> None:
    r = _run(tmp_path / "ok", "def kernel(x):\n    return torch.sin(x) * 2\n")
    assert r.status is Status.PASSED, [f.message for f in r.findings]
    early = _truth_before_first_call(asked)
    # every case after the first of each input dtype (float32, float16)
    assert len(early) >= r.cases - 2 - 2, (early, r.cases)
    assert sum(kind == "truth" for kind, _ in asked) == sum(kind == "waited" for kind, _ in asked)


def test_a_wrong_kernel_is_still_caught_on_a_truth_asked_for_early(tmp_path: Path,
                                                                   asked: list[tuple[str, Any]]) -> None:
    r = _run(tmp_path / "bug", "def kernel(x):\n    y = torch.sin(x) * 2\n    y[..., 100:] *= 1.01\n    return y\n")
    assert r.status is Status.FAILED and "mismatch" in {f.kind for f in r.findings}
    wrong = {f.details.get("case") or f.message for f in r.findings if f.kind == "mismatch"}
    assert wrong and _truth_before_first_call(asked)


# Refuses some cases, and returns float64 on others: the early truth (asked for float32 or float16)
# is read and dropped, or asked for again, and the answers that follow stay in step.
UNEVEN = """\
def kernel(x):
    n = x.shape[-1]
    if n % 5 == 3:
        raise ValueError("no kernel for this width")
    y = torch.sin(x.double()) * 2
    return y if n % 7 == 2 else y.to(x.dtype)
"""


def test_refusals_and_other_dtypes_drop_the_early_truth_and_every_later_answer_is_its_own(
        tmp_path: Path, asked: list[tuple[str, Any]]) -> None:
    r = _run(tmp_path / "uneven", UNEVEN)
    errors = {f.kind for f in r.findings if f.severity is Severity.ERROR}
    assert errors <= {"dtype"}, [f.message for f in r.findings]
    assert not {"reference-error", "worker-protocol", "cuda-error"} & {f.kind for f in r.findings}
    refused = [f for f in r.findings if f.kind == "refused"]
    assert refused, "some widths are refused"
    truths = [what for kind, what in asked if kind == "truth"]
    assert len(truths) == sum(kind == "waited" for kind, _ in asked), "every truth asked for was read"
    # each case whose outputs came back in float64 had its truth asked for in float64 (again, where
    # it had been asked for early in the input's dtype)
    wide = {t[0] for t in truths if t[3]["n"] % 7 == 2 and t[3]["n"] % 5 != 3}
    assert wide and "dtype" in errors
    ran = {t[0]: t for t in truths if t[1] == 0 and t[3]["n"] % 5 != 3}  # the last truth asked per case
    assert {case for case, t in ran.items() if t[2].get("out") == "float64"} == wide
    assert len(ran) > len(wide) + 4


def test_through_the_sandboxed_workers_every_answer_stays_with_its_question(tmp_path: Path) -> None:
    """The same kernel through the executor (sandboxed workers, answers on real sockets): an
    early truth left unread would be the answer to the next question asked of the reference."""
    from gpu_gate.executor.options import ExecOptions
    from gpu_gate.executor.scheduling import execute

    root = tmp_path / "repo"
    root.mkdir()
    (root / "gate_spec.py").write_text(SPEC.replace("KERNEL(x)", "kernel(x)") + textwrap.dedent(UNEVEN))
    job = Job(id="equivalence:gate_spec.py::kern", check="equivalence", level="required", kernels=(),
              spec=SpecRef("gate_spec.py", "kern"), options={"cases": 16, "shrink": False}, seed=5)
    (tmp_path / "work").mkdir()
    [r] = execute([job], ExecOptions(repo_root=root, gpus=(), timeout_s=300, work_root=tmp_path / "work"))
    assert {f.kind for f in r.findings if f.severity is Severity.ERROR} == {"dtype"}, \
        [f.message for f in r.findings]
    assert r.cases == 16 and any(f.kind == "refused" for f in r.findings)
