"""The determinism finding says how often: every repeat runs, even after one differed, and the
finding gives how many of them differed and how far the worst landed from the reference. Real
workers, on the CPU (the runs under load on other streams need a GPU)."""
from __future__ import annotations

import textwrap
import time
from pathlib import Path

import pytest

from gpu_gate.findings import JobResult, Status
from gpu_gate.inprocess import Context
from gpu_gate.judge.job import run_job
from gpu_gate.protocol.jobs import Job, SpecRef

SPEC = """\
import torch
import gpu_gate as gg
from lib.kern import double

@gg.spec(dims={"rows": gg.Dim(1, 32), "n": gg.Dim(1, 64)},
         inputs={"x": gg.Tensor(("rows", "n"), dtypes=["float32"])},
         reference=lambda x: x * 2)
def double_gate(x):
    return double(x)
"""

# Off by 0.5 on every other call (in float32: 0.5 and rounding): the first run is right, then half the
# repeats are not.
EVERY_OTHER = """\
import torch

_calls = [0]

def double(x):
    _calls[0] += 1
    return x * 2 + (0.5 if _calls[0] % 2 == 0 else 0.0)
"""

HONEST = "def double(x):\n    return x * 2\n"


def _run(root: Path, kern: str, spec: str = SPEC) -> JobResult:
    (root / "lib").mkdir(parents=True)
    (root / "lib" / "__init__.py").write_text("")
    (root / "lib" / "kern.py").write_text(textwrap.dedent(kern))
    (root / "gate").mkdir()
    (root / "gate" / "double_gate.py").write_text(spec)
    job = Job(id="determinism:gate/double_gate.py::double_gate", check="determinism", level="required",
              kernels=(), spec=SpecRef("gate/double_gate.py", "double_gate"), seed=3,
              options={"repeats": 8, "contention": False})
    # The executor runs determinism on a GPU only; the check itself, called as a library's own test
    # suite calls it, runs on the CPU too.
    return run_job(job, Context(repo_root=root, device="cpu", workdir=root / "work"))


def test_the_finding_counts_the_runs_that_differed(tmp_path: Path) -> None:
    r = _run(tmp_path / "bug", EVERY_OTHER)
    assert r.status is Status.FAILED, [f.message for f in r.findings]
    (f,) = r.findings
    assert f.kind == "nondeterministic"
    assert f.details["runs_differed"] == {"alone": 4} and f.details["repeats"] == 8
    assert "differed from the first run in 4 of 8 runs alone" in f.message
    assert abs(f.details["worst_error"] - 0.5) < 1e-5 and "off the reference by up to 0.5" in f.message


def test_a_deterministic_kernel_passes(tmp_path: Path) -> None:
    r = _run(tmp_path / "ok", HONEST)
    assert r.status is Status.PASSED, [f.message for f in r.findings]
    # where the job's time went: the spec's import, then each case's repeats (the head's code here)
    timing = r.extra.timing
    # each figure is rounded to 10 ms: the sum of the rounded cases may pass the rounded total by half
    # a unit per figure
    slack = 0.005 * (len(timing["cases"]) + 1)
    assert timing["load_s"] > 0 and timing["total_s"] + slack >= sum(c[2] for c in timing["cases"])
    assert len(timing["cases"]) == r.cases and {c[1] for c in timing["cases"]} == {"head"}


def test_the_settings_each_case_is_repeated_in() -> None:
    """Alone everywhere; on a GPU, under load and on fewer SMs; with the caller's stream held back
    only for a candidate that used streams of its own (the other settings delay those); after a
    producer only where the spec names one, with fewer runs. On the CPU: alone only."""
    from gpu_gate.judge.checks.determinism import (
        CALLER_LATE,
        FEWER_SMS,
        PRODUCED_ON_EVENT,
        PRODUCED_ON_STREAM,
        repeat_settings,
    )

    def names(*args) -> list[tuple[str, int]]:  # type: ignore[no-untyped-def]
        return [(w, n) for w, _, n in repeat_settings(*args)]

    load = "under concurrent load on other streams"
    assert names("cpu", True, 8, ("x",), True) == [("alone", 8)]
    assert names("cuda", True, 8, (), False) == [("alone", 8), (load, 8), (FEWER_SMS, 8)]
    assert names("cuda", True, 8, (), True) == [("alone", 8), (load, 8), (FEWER_SMS, 8), (CALLER_LATE, 8)]
    assert names("cuda", False, 8, (), True) == [("alone", 8)]
    got = repeat_settings("cuda", True, 8, ("x", "w"), False)
    assert [(w, n) for w, _, n in got][3:] == [(PRODUCED_ON_STREAM.format(names="'x', 'w'"), 2),
                                               (PRODUCED_ON_EVENT.format(names="'x', 'w'"), 2)]
    assert got[3][1] == {"produce": "stream", "producer": ("x", "w")} and got[4][1]["produce"] == "event"
    assert [n for *_, n in repeat_settings("cuda", False, 16, ("x",), False)] == [16, 4, 4]


def test_a_spec_with_a_producer_runs_on_the_cpu_without_one(tmp_path: Path) -> None:
    """No GPU, no producer kernel: the determinism check runs its repeats alone, as for any spec,
    and says nothing of producers (on a GPU runner the producer runs; see tests/gpu/test_races_gpu.py)."""
    spec = SPEC.replace("reference=lambda x: x * 2)", "reference=lambda x: x * 2, producer=['x'])")
    assert "producer=['x']" in spec
    r = _run(tmp_path / "produced", HONEST, spec=spec)
    assert r.status is Status.PASSED, [f.message for f in r.findings]
    assert not r.findings


def test_without_a_gpu_the_producer_says_why_it_cannot_run() -> None:
    """The producer kernel needs CuPy and a CUDA device: here it declines, with the reason the
    job's `producer-unavailable` finding carries, and asks for no mode it does not know."""
    import pytest

    from gpu_gate.worker.producer import Producer

    p = Producer()
    with pytest.raises(ValueError, match="unknown producer mode 'later'"):
        p.write([], "later", 0.001)
    assert p.write([], "stream", 0.001) is False
    assert p.why_not and p.why_not.startswith("no producer kernel (")
    assert p.write([], "event", 0.001) is False  # and keeps declining, without trying again


GRAD_SPEC = """\
import torch
import gpu_gate as gg
from lib.kern import double

@gg.spec(dims={"rows": gg.Dim(1, 32), "n": gg.Dim(1, 64)},
         inputs={"x": gg.Tensor(("rows", "n"), dtypes=["float64"])},
         reference=lambda x: x * 2, grads=["x"])
def double_gate(x):
    return double(x)
"""

# A backward that writes its result into the upstream gradient it was given, as fused kernels do to
# save memory (Liger-Kernel's among them): legitimate, and the same on every run. (In float64 the
# gradient the candidate gets is the very tensor the worker received: no conversion copies it.)
IN_PLACE_BACKWARD = """\
import torch

class Double(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        return x * 2

    @staticmethod
    def backward(ctx, grad):
        return grad.mul_(2)

def double(x):
    return Double.apply(x)
"""


def test_repeats_send_the_upstream_gradient_once_and_each_run_gets_a_fresh_copy(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The repeats of a case run on the worker's copy of the upstream gradient (sending a large one
    with each repeat was most of a contention case's time on an H100). Each run gets a copy of its
    own: a backward that writes into its upstream gradient must not make the repeats differ."""
    from gpu_gate.judge.workers import Candidate
    from gpu_gate.protocol.messages import Call

    sent: list[str] = []
    send = Candidate._send

    def counting(self: Candidate, request: object, blobs: object, budget: int = 0) -> None:
        if isinstance(request, Call) and (request.upstream is not None or request.upstream_again):
            sent.append("again" if request.upstream_again else "recipe")
        send(self, request, blobs, budget)  # type: ignore[arg-type]

    monkeypatch.setattr(Candidate, "_send", counting)
    r = _run(tmp_path / "inplace", IN_PLACE_BACKWARD, GRAD_SPEC)
    assert r.status is Status.PASSED, [f.message for f in r.findings]
    cases = r.cases
    assert cases >= 2
    # the gradient's recipe with a case's first run (the worker makes the values from it); each of
    # the 8 repeats runs on the worker's copy ("again"): sent with every repeat, they were 27
    assert sent.count("recipe") <= 2 * cases, (sent, cases)
    assert sent.count("again") >= 8 * cases, (sent, cases)


# Uses its input's memory as scratch (fused kernels do, Liger-Kernel's GEGLU backward among them):
# each run must start from the case's inputs again, and what the call wrote is not sent back.
SCRATCH_INPUT = """\
import torch

def double(x):
    out = x * 2
    x.fill_(7.0)
    return out
"""


def test_repeats_start_from_the_inputs_again_and_do_not_send_them_back(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import torch

    from gpu_gate.protocol.messages import tensors

    buffers: list[int] = []
    encode_tensor = tensors.encode_tensor

    def counting(t: object, blobs: list[object]) -> object:
        if isinstance(t, torch.Tensor) and t.dtype == torch.uint8:  # an input's guarded buffer
            buffers.append(t.numel())
        return encode_tensor(t, blobs)

    monkeypatch.setattr(tensors, "encode_tensor", counting)
    r = _run(tmp_path / "scratch", SCRATCH_INPUT)
    # every repeat ran on the case's own inputs (not on the 7s the run before left): no difference
    assert r.status is Status.PASSED, [f.message for f in r.findings]
    # each case's buffer: sent to the worker once, and back once from the first run; with every
    # repeat's buffer sent back too, it was 10 per case
    assert len(buffers) <= 2 * r.cases, (len(buffers), r.cases)


FETCH_S = 0.4  # how long each fetch of the reference takes in the tests below


@pytest.fixture
def truths_asked(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The cases the determinism check asked the reference for (each fetch made FETCH_S slower)."""
    from gpu_gate.judge import workers

    asked: list[str] = []
    truth = workers.Reference.truth

    def counting(self: object, case: object, *a: object, **k: object) -> object:
        asked.append(getattr(case, "id", "?"))
        time.sleep(FETCH_S)
        return truth(self, case, *a, **k)  # type: ignore[arg-type]

    monkeypatch.setattr(workers.Reference, "truth", counting)
    return asked


def test_the_reference_is_asked_for_only_when_a_repeat_differs(tmp_path: Path, truths_asked: list[str]) -> None:
    """Repeats that all agree bitwise with the first run need no reference; one that differs is
    judged against it (its tolerance, and how far the worst run landed). Its fetch is timed as a
    part of its own, not also in the repeats' part."""
    honest = _run(tmp_path / "honest", HONEST)
    assert honest.status is Status.PASSED and truths_asked == []
    bug = _run(tmp_path / "bug", EVERY_OTHER)
    assert bug.status is Status.FAILED and len(truths_asked) == 1  # once for the case, not once per repeat
    assert bug.findings[0].details["worst_error"] > 0.4
    parts = next(c[4] for c in bug.extra.timing["cases"] if c[4].get("reference_s"))
    repeats = sum(v for k, v in parts.items() if k.startswith("repeats_"))
    assert parts["reference_s"] >= FETCH_S and repeats < FETCH_S, parts


MUL_SPEC = """\
import torch
import gpu_gate as gg
from lib.kern import mul

@gg.spec(dims={"rows": gg.Dim(1, 32), "n": gg.Dim(1, 64)},
         inputs={"a": gg.Tensor(("rows", "n"), dtypes=["float32"]), "b": gg.Tensor(("rows", "n"), dtype="like:a")},
         reference=lambda a, b: a * b, grads=["a", "b"], mutates={"a": "grad:a", "b": "grad:b"})
def double_gate(a, b):
    return mul(a, b)
"""

# The backward writes its gradients into its inputs' memory and returns them (Liger-Kernel's GEGLU
# does): the gradient outputs are the input buffers, which the worker puts back after every run.
GRADS_IN_INPUTS = """\
import torch

class Mul(torch.autograd.Function):
    @staticmethod
    def forward(ctx, a, b):
        ctx.save_for_backward(a, b)
        return a * b

    @staticmethod
    def backward(ctx, g):
        a, b = ctx.saved_tensors
        ga, gb = g * b, g * a
        a.copy_(ga)
        b.copy_(gb)
        return a, b

def mul(a, b):
    return Mul.apply(a, b)
"""


def test_outputs_that_are_the_inputs_memory_repeat_as_the_same(tmp_path: Path, truths_asked: list[str]) -> None:
    """The first run's outputs are held as they came out, before the worker puts the inputs back:
    held after, the gradients written into the inputs were held as the inputs' old values, every
    repeat of a deterministic kernel "differed", was sent back whole and judged against the
    reference (on an H100, Liger's GEGLU: 0.3 s per repeat and the reference on every case)."""
    r = _run(tmp_path / "grads_in_inputs", GRADS_IN_INPUTS, MUL_SPEC)
    assert r.status is Status.PASSED, [f.message for f in r.findings]
    assert truths_asked == [], truths_asked  # every repeat was bitwise the first run: nothing to judge
