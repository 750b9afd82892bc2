"""The normal distribution's extreme: the largest scale the dtype holds without an overflow in the
reference, found by asking the reference before the case runs, and written into the case."""
from __future__ import annotations

import dataclasses
import textwrap
from pathlib import Path
from typing import Any

import torch

import gpu_gate as gg
from gpu_gate.findings import Status
from gpu_gate.inprocess import Context
from gpu_gate.judge.equivalence.magnitude import settle, unsettled
from gpu_gate.judge.job import run_job
from gpu_gate.protocol.cases import Case, InputChoice
from gpu_gate.protocol.early import MAGNITUDE
from gpu_gate.protocol.inputs import materialize, reference_inputs
from gpu_gate.protocol.jobs import Job, SpecRef

SPEC = """
import torch
import gpu_gate as gg
from gpu_gate.spec import upcast


def reference(x):
    xf = upcast(x)
    return (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + 1e-6)).to(x.dtype)


DECL = dict(dims={"rows": gg.Dim(1, 16), "n": gg.Dim(1, 1024)},
            inputs={"x": gg.Tensor(("rows", "n"), dtypes=["float16"], dists=["normal"])},
            reference=reference)


@gg.spec(name="rms_squares_in_fp16", **DECL)
def bug(x):  # x * x overflows float16 once |x| passes 256
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6)


@gg.spec(name="rms_squares_in_fp32", **DECL)
def twin(x):
    return reference(x)
"""


def _run(root: Path, name: str, seed: int) -> Any:
    (root / "rms_gate.py").write_text(textwrap.dedent(SPEC))
    job = Job(id="j", check="equivalence", level="required", kernels=(), spec=SpecRef("rms_gate.py", name), seed=seed,
              options={"cases": 4, "shrink": False, "growth": False})
    return run_job(job, Context(repo_root=root, device="cpu", workdir=root))


def test_an_overflow_only_the_largest_magnitude_reaches_is_caught(tmp_path: Path) -> None:
    """Values of unit scale never square past float16's range; the extreme of the normal
    distribution, the largest scale at which the reference stays finite, does."""
    for seed in range(3):
        r = _run(tmp_path, "rms_squares_in_fp16", seed)
        assert r.status is Status.FAILED, [f.message for f in r.findings]
        bad = [f for f in r.findings if f.kind in ("mismatch", "nan", "constant-output")]  # x * x is inf: rsqrt 0
        assert bad and "normal(" in bad[0].details["case"], bad[0].details["case"]
        (scale,) = r.extra.magnitudes.values()
        assert 256 < scale <= 2.0 ** 12
        twin = _run(tmp_path, "rms_squares_in_fp32", seed)
        assert twin.status is Status.PASSED, [f.message for f in twin.findings]


class _InProcessReference:
    """The reference worker's truth, computed here: the float64 reference and torch in the dtype."""

    def __init__(self, spec: Any) -> None:
        self.spec, self.asked = spec, 0

    def truth_for(self, case: Case, dtypes: dict[str, str]) -> Any:
        self.asked += 1
        m = materialize(self.spec, case, "cpu")
        ref = {"out": self.spec.reference(**reference_inputs(self.spec, m, upcast=True))}
        base = {"out": self.spec.reference(**reference_inputs(self.spec, m, upcast=False))}
        return lambda: (ref, base, {})


def test_the_scale_is_the_largest_power_of_two_the_reference_holds() -> None:
    """A row sum in float16: the float64 sum must fit float16 and torch's float16 sum stay finite.
    The largest scale that passes is found by bisection, and twice it fails."""
    @gg.spec(dims={"rows": gg.Dim(1, 4), "n": gg.Dim(1, 4096)},
             inputs={"x": gg.Tensor(("rows", "n"), dtypes=["float16"])}, reference=lambda x: x.sum(-1))
    def s(x):  # noqa: ANN001, ANN202
        return x.sum(-1)

    case = Case("c0001", 7, {"rows": 4, "n": 1000}, {"x": InputChoice("float16", "normal", "contiguous", MAGNITUDE)})
    assert unsettled(case)
    ref = _InProcessReference(s)
    settled = settle(case, ref)  # type: ignore[arg-type]
    scale = settled.inputs["x"].param
    assert not unsettled(settled) and scale > 1 and ref.asked <= 6

    def fits(scale: float) -> bool:
        m = materialize(s, dataclasses.replace(case, inputs={"x": InputChoice("float16", "normal", "contiguous",
                                                                                 scale)}), "cpu")
        total = m.tensors["x"].double().sum(-1)
        return bool(total.abs().max() <= torch.finfo(torch.float16).max and
                    torch.isfinite(m.tensors["x"].sum(-1)).all())

    assert fits(scale) and not fits(2 * scale)
