"""Triton kernels written as real libraries write them (tests/interp_shaped: scalar arguments cast with
``eps.to(tl.float32)``, libdevice's ``rsqrt``, a float scale that makes float16 data float32 before
``tl.exp``, a bfloat16 bias gradient summed with bfloat16 atomics) run under TRITON_INTERPRET=1 with the
worker's adaptations (gpu_gate.worker.interpreter): the correct kernels pass in float32, float16 and
bfloat16, and each job's ``interpreter-adapted`` note names what was adapted; planted bugs are caught.

Without the adaptations (the guard switched off) the same specs do not run at all: Triton's
interpreter stops at each of those constructs, and gpu-gate could only say so."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from gpu_gate.findings import JobResult, Severity, Status

FIXTURE = Path(__file__).resolve().parents[1] / "interp_shaped"
SPECS = {"rms_norm_gate": "gate/rms_norm_gate.py", "scaled_softmax_gate": "gate/scaled_softmax_gate.py",
         "bias_gate": "gate/bias_gate.py", "swiglu_gate": "gate/swiglu_gate.py"}

DRIVER = """
import json, sys
from pathlib import Path
if sys.argv[3] in ("off", "bf16-forced"):  # the guard switched off: the worker puts no adaptation in place
    import gpu_gate.worker.interpreter as adapt
    adapt.install = lambda: []
if sys.argv[3] == "bf16-forced":  # and bfloat16 runs anyway, on the interpreter's own bfloat16 arithmetic
    import gpu_gate.judge.checks.equivalence as eq
    eq.INTERPRETER_BAD_DTYPES = frozenset({"float8_e4m3fn", "float8_e5m2"})
from gpu_gate.inprocess import Context
from gpu_gate.judge.job import run_job
from gpu_gate.protocol.jobs import Job, SpecRef

root, out = Path(sys.argv[1]), Path(sys.argv[2])
results = {}
for arg in sys.argv[4:]:
    file, name = arg.split("::")
    job = Job(id=name, check="equivalence", level="required", kernels=(), spec=SpecRef(file, name), seed=3,
              options={"cases": 6, "shrink": False, "growth": False}, python_path=("src", ""))
    results[name] = run_job(job, Context(repo_root=root, device="cpu", workdir=out.parent)).to_json()
out.write_text(json.dumps(results))
"""


def _run(root: Path, out: Path, mode: str, names: list[str]) -> dict[str, JobResult]:
    env = {**os.environ, "TRITON_INTERPRET": "1"}
    specs = [f"{SPECS[n]}::{n}" for n in names]
    p = subprocess.run([sys.executable, "-c", DRIVER, str(root), str(out), mode, *specs], env=env,
                       capture_output=True, text=True, timeout=1800, check=False)
    assert p.returncode == 0, p.stderr[-4000:]
    return {k: JobResult.from_json(v) for k, v in json.loads(out.read_text()).items()}


@pytest.fixture(scope="module")
def adapted(tmp_path_factory: pytest.TempPathFactory) -> dict[str, JobResult]:
    return _run(FIXTURE, tmp_path_factory.mktemp("adapted") / "r.json", "on", list(SPECS))


@pytest.fixture(scope="module")
def unadapted(tmp_path_factory: pytest.TempPathFactory) -> dict[str, JobResult]:
    return _run(FIXTURE, tmp_path_factory.mktemp("unadapted") / "r.json", "off",
                ["rms_norm_gate", "scaled_softmax_gate", "bias_gate"])


def _dtypes(r: JobResult) -> set[str]:
    return {d for i in r.extra.coverage["inputs"].values() if i["kind"] == "tensor" for d in i["dtype"]}


def _adapted(r: JobResult) -> dict[str, str]:
    note = next(f for f in r.findings if f.kind == "interpreter-adapted")
    assert note.severity is Severity.NOTE
    return {name: note.message for name in note.details["adaptations"]}


@pytest.mark.parametrize(("name", "dtypes", "needed"), [
    ("rms_norm_gate", {"float32", "float16", "bfloat16"}, {"float-arguments", "libdevice", "bfloat16"}),
    ("scaled_softmax_gate", {"float32", "float16", "bfloat16"}, {"float-arguments", "bfloat16"}),
    ("bias_gate", {"bfloat16"}, {"bfloat16"}),
    ("swiglu_gate", {"bfloat16", "float32"}, {"bfloat16"}),
])
def test_the_kernels_run_and_pass_and_the_note_names_each_adaptation(adapted: dict[str, JobResult], name: str,
                                                                    dtypes: set[str], needed: set[str]) -> None:
    r = adapted[name]
    bad = [f"{f.kind}: {f.message}" for f in r.findings if f.severity is not Severity.NOTE]
    assert r.status is Status.PASSED and not bad and r.cases == 6, bad
    assert _dtypes(r) == dtypes
    assert needed <= set(_adapted(r)), _adapted(r)
    assert not any(f.kind == "dtype-not-run" for f in r.findings)


def test_the_note_says_what_was_adapted_and_where(adapted: dict[str, JobResult]) -> None:
    message = next(iter(_adapted(adapted["rms_norm_gate"]).values()))
    assert message.startswith("the Triton interpreter (no GPU) was adapted to run these kernels as a GPU does: ")
    assert "float-arguments (_rms_norm_bwd, _rms_norm_fwd): float arguments reached the kernels as float32 " \
           "scalars" in message
    assert "libdevice (rsqrt): libdevice functions were computed in float64" in message


@pytest.mark.parametrize(("name", "stops"), [
    ("rms_norm_gate", "'float' object has no attribute 'to'"),
    ("scaled_softmax_gate", "Expected dtype ['fp32', 'fp64'] but got fp16"),
])
def test_without_the_adaptations_the_interpreter_stops(unadapted: dict[str, JobResult], name: str,
                                                       stops: str) -> None:
    r = unadapted[name]
    found = {f.kind: f for f in r.findings}
    assert r.status is Status.NOT_RUN, [f.message for f in r.findings]
    assert stops in found["interpreter-unsupported"].message


def test_without_the_adaptations_bfloat16_is_not_run(unadapted: dict[str, JobResult]) -> None:
    r = unadapted["bias_gate"]
    assert r.status is Status.NOT_RUN and "bfloat16" in (r.reason or ""), r.reason
    assert any(f.kind == "dtype-not-run" and "computes bfloat16/float8 arithmetic wrongly" in f.message
               for f in r.findings)


def test_the_interpreters_own_bfloat16_arithmetic_is_wrong(tmp_path: Path) -> None:
    """Why bfloat16 cases need the adaptation: forced to run on the interpreter's own arithmetic, a
    correct kernel that multiplies in bfloat16 fails (the interpreter multiplies the raw bits)."""
    r = _run(FIXTURE, tmp_path / "r.json", "bf16-forced", ["swiglu_gate"])["swiglu_gate"]
    kinds = {f.kind for f in r.findings if f.severity is Severity.ERROR}
    assert r.status is Status.FAILED and kinds & {"mismatch", "nan"}, [f.message for f in r.findings]


# Planted bugs in a copy of the fixture, each in a construct the interpreter needed adapting for.
BUGS = {
    # the mean of the squares over the padded block, not the row: beside eps.to() and libdevice's rsqrt
    "rms_norm_gate": ("src/normkit/rms_norm.py", "tl.sum(x * x, axis=0) / n_cols", "tl.sum(x * x, axis=0) / BLOCK",
                      "mismatch"),
    # each program stores its partial bias gradient instead of adding it: bfloat16 atomics are what is right
    "bias_gate": ("src/normkit/bias.py", "tl.atomic_add(DB + cols,", "tl.store(DB + cols,", "mismatch"),
}


@pytest.fixture(scope="module")
def planted(tmp_path_factory: pytest.TempPathFactory) -> dict[str, JobResult]:
    root = tmp_path_factory.mktemp("planted") / "repo"
    shutil.copytree(FIXTURE, root)
    for file, good, bad, _ in BUGS.values():
        text = (root / file).read_text()
        assert good in text
        (root / file).write_text(text.replace(good, bad))
    return _run(root, root.parent / "r.json", "on", list(BUGS))


@pytest.mark.parametrize("name", list(BUGS))
def test_planted_bugs_are_caught_under_the_adapted_interpreter(planted: dict[str, JobResult], name: str) -> None:
    r = planted[name]
    kinds = {f.kind for f in r.findings if f.severity is Severity.ERROR}
    assert r.status is Status.FAILED and BUGS[name][3] in kinds, [f.message for f in r.findings]
