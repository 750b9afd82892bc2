"""Tolerances that correct kernels meet and that wrong ones still fail: the rounding envelope
(gpu_gate/protocol/rounding.py) against fp32 accumulation in another order than torch's,
a gradient whose true value is exactly 0, and torch's CPU cumsum that accumulates in double.

Each correct candidate here failed the rule that judged against torch's result alone; each
wrong twin must still fail."""
from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from gpu_gate.protocol.cases import Case, InputChoice
from gpu_gate.errors import SpecError
from gpu_gate.findings import JobResult, Severity, Status
from gpu_gate.inprocess import Context
from gpu_gate.judge.job import run_job
from gpu_gate.protocol.jobs import Job, SpecRef

CORPUS = Path(__file__).parent.parent / "corpus"
HEADER = "import torch\nimport gpu_gate as gg\nfrom dweight import sequential_fp32\n"


def run(root: Path, file: str, spec: str, seed: int = 0, case: Case | None = None, **options: object) -> JobResult:
    opts = {"cases": 12, "shrink": False, **options}
    job = Job(id="j", check="equivalence", level="required", kernels=(), spec=SpecRef(file, spec), options=opts,
              seed=seed, case=case.token() if case else None)
    return run_job(job, Context(repo_root=root, device="cpu", workdir=root))


def errors(r: JobResult) -> list[str]:
    return [f"{f.kind}: {f.message}" for f in r.findings if f.severity is Severity.ERROR]


def long_dweight_case(dist: str, seed: int) -> Case:
    inputs = {"x": InputChoice("float32", dist, "contiguous"), "w": InputChoice("float32", "normal", "contiguous")}
    return Case("long", seed, {"rows": 1 << 18, "hidden": 8}, inputs)


# --- fp32 accumulation in any order passes; a bf16 accumulation fails ---------------------


@pytest.mark.parametrize("dist", ["normal", "uniform_pos"])
def test_sequential_fp32_accumulation_over_2e18_rows_passes(dist: str, tmp_path: Path) -> None:
    r = run(CORPUS, "dweight.py", "dweight_fp32_sequential", case=long_dweight_case(dist, 3))
    assert r.status is Status.PASSED, "\n".join(errors(r))
    assert r.cases == 1


@pytest.mark.parametrize("dist", ["normal", "uniform_pos"])
def test_bf16_accumulation_over_the_same_rows_fails(dist: str, tmp_path: Path) -> None:
    r = run(CORPUS, "dweight.py", "dweight_bf16_acc", case=long_dweight_case(dist, 3))
    assert r.status is Status.FAILED
    (f,) = [f for f in r.findings if f.kind == "mismatch"]
    assert f.details["output"] == "grad:w" and f.details["ratio"] > 3


def test_a_declared_bf16_accumulation_is_judged_by_the_bf16_envelope(tmp_path: Path) -> None:
    """The same bf16-accumulating kernel, declared as such (accumulate="bfloat16"), passes:
    the declaration, not torch's algorithm, says what is correct."""
    (tmp_path / "dweight.py").write_text((CORPUS / "dweight.py").read_text().replace(
        "    grads=[\"x\", \"w\"],\n)", "    grads=[\"x\", \"w\"],\n    accumulate=\"bfloat16\",\n)"))
    r = run(tmp_path, "dweight.py", "dweight_bf16_acc", case=long_dweight_case("normal", 3))
    assert r.status is Status.PASSED, "\n".join(errors(r))


def test_accumulate_must_be_a_float_dtype() -> None:
    import gpu_gate as gg

    with pytest.raises(SpecError, match="accumulate='int8' is not one of float64, float32, float16, bfloat16"):
        gg.spec(dims={}, inputs={}, reference=lambda: None, accumulate="int8")


# --- a gradient whose true value is exactly 0 -------------------------------------------

SHIFT = """
    def reference(x, b):
        return torch.log_softmax(x + b, -1)

    def make(grad_b):
        class Shift(torch.autograd.Function):
            @staticmethod
            def forward(ctx, x, b):
                y = torch.log_softmax(x + b, -1)
                ctx.save_for_backward(y)
                return y

            @staticmethod
            def backward(ctx, g):
                (y,) = ctx.saved_tensors
                gx = g - y.exp() * sequential_fp32(g, -1)[..., -1:]
                return gx, grad_b(gx)

        return Shift

    # the gradient of a row's shift is sum(g) - sum(g) * sum(softmax) = 0 exactly; a kernel
    # sums its fp32 gx and gets the rounding of those terms, about 1e-7 of their magnitude
    EXACT = make(lambda gx: sequential_fp32(gx, -1)[..., -1:])
    # wrong by 1e-4 of the terms' magnitude: small, but 25 times what fp32 rounding can do
    OFF = make(lambda gx: sequential_fp32(gx, -1)[..., -1:] + 1e-4 * gx.abs().sum(-1, keepdim=True))
    DECL = dict(dims={"rows": gg.Dim(1, 64), "classes": gg.Dim(2, 4096, reduction=True)},
                inputs={"x": gg.Tensor(("rows", "classes"), dtypes=["float32"]),
                        "b": gg.Tensor(("rows", 1), dtype="like:x")},
                reference=reference, grads=["x", "b"])

    @gg.spec(name="shift_exact", **DECL)
    def shift_exact(x, b):
        return EXACT.apply(x, b)

    @gg.spec(name="shift_off", **DECL)
    def shift_off(x, b):
        return OFF.apply(x, b)
"""


def _with_corpus(tmp_path: Path, body: str) -> Path:
    (tmp_path / "dweight.py").write_text((CORPUS / "dweight.py").read_text())
    (tmp_path / "gate_spec.py").write_text(HEADER + textwrap.dedent(body))
    return tmp_path


@pytest.mark.parametrize("seed", range(3))
def test_a_zero_gradient_with_rounding_noise_passes(seed: int, tmp_path: Path) -> None:
    root = _with_corpus(tmp_path, SHIFT)
    r = run(root, "gate_spec.py", "shift_exact", seed=seed, cases=16)
    assert r.status is Status.PASSED, "\n".join(errors(r))


@pytest.mark.parametrize("seed", range(3))
def test_a_zero_gradient_that_is_wrong_by_more_than_rounding_fails(seed: int, tmp_path: Path) -> None:
    root = _with_corpus(tmp_path, SHIFT)
    r = run(root, "gate_spec.py", "shift_off", seed=seed, cases=16)
    bad = [f for f in r.findings if f.kind == "mismatch"]
    assert r.status is Status.FAILED and bad and all(f.details["output"] == "grad:b" for f in bad)
    assert "ratio inf" not in bad[0].message


# --- CPU cumsum accumulates in double; a blocked fp32 scan is judged by fp32's envelope -----

SCAN = """
    def blocked_scan(x, carry_dtype, block=128):
        out = torch.empty_like(x)
        carry = torch.zeros(x.shape[:-1] + (1,), dtype=carry_dtype)
        for s in range(0, x.shape[-1], block):
            part = sequential_fp32(x[..., s:s + block], -1) + carry.float()
            out[..., s:s + block] = part
            carry = part[..., -1:].to(carry_dtype)
        return out

    DECL = dict(dims={"rows": gg.Dim(1, 8), "n": gg.Dim(1, 1 << 16, reduction=True)},
                inputs={"x": gg.Tensor(("rows", "n"), dtypes=["float32"])}, reference=lambda x: x.cumsum(-1))

    @gg.spec(name="scan_fp32", **DECL)
    def scan_fp32(x):
        return blocked_scan(x, torch.float32)

    @gg.spec(name="scan_bf16_carry", **DECL)
    def scan_bf16_carry(x):
        return blocked_scan(x, torch.bfloat16)
"""


@pytest.mark.parametrize("seed", range(3))
def test_a_blocked_fp32_scan_passes_on_the_cpu(seed: int, tmp_path: Path) -> None:
    root = _with_corpus(tmp_path, SCAN)
    r = run(root, "gate_spec.py", "scan_fp32", seed=seed, cases=16)
    assert r.status is Status.PASSED, "\n".join(errors(r))


def test_a_scan_that_carries_in_bf16_fails(tmp_path: Path) -> None:
    root = _with_corpus(tmp_path, SCAN)
    r = run(root, "gate_spec.py", "scan_bf16_carry", cases=16)
    assert r.status is Status.FAILED and "mismatch" in {f.kind for f in r.findings}


# --- the envelope itself -----------------------------------------------------------------


def test_the_envelope_of_a_sum_is_the_rounding_of_its_running_sums() -> None:
    import torch

    from gpu_gate.protocol.rounding import RoundingNoise

    x = torch.randn(4, 4096, dtype=torch.float64)
    with RoundingNoise(2.0**-24, 2.0**-24, seed=1, device="cpu"):
        s = x.sum(-1)
    walk = x.cumsum(-1).pow(2).sum(-1).sqrt()
    assert torch.allclose((s - x.sum(-1)).abs(), 3 * 2.0**-24 * walk, rtol=1e-6)


def test_the_envelope_of_a_matmul_is_sqrt_k_roundoffs_of_the_terms_magnitude() -> None:
    import torch

    from gpu_gate.protocol.rounding import RoundingNoise

    a, b = torch.randn(8, 1024, dtype=torch.float64), torch.randn(1024, 4, dtype=torch.float64)
    with RoundingNoise(2.0**-24, 2.0**-24, seed=1, device="cpu"):
        c = a @ b
    assert torch.allclose((c - a @ b).abs(), 32 * 2.0**-24 * (a.abs() @ b.abs()), rtol=1e-6)


def test_exact_operations_are_left_exact() -> None:
    import torch

    from gpu_gate.protocol.rounding import RoundingNoise

    x = torch.randn(8, 33, dtype=torch.float64)
    idx = torch.tensor([3, 1, 1])
    with RoundingNoise(2.0**-24, 2.0**-24, seed=1, device="cpu"):
        outs = [x.amax(-1), x[idx], x.t().contiguous(), torch.where(x > 0, x, -x), x.clone(), x.max(-1).values]
        noisy = x * 1.0
    exact = [x.amax(-1), x[idx], x.t().contiguous(), torch.where(x > 0, x, -x), x.clone(), x.max(-1).values]
    assert all(torch.equal(a, b) for a, b in zip(outs, exact))
    assert not torch.equal(noisy, x) and ((noisy - x).abs() <= 2 * 2.0**-24 * x.abs()).all()


# --- the same zero gradient in bfloat16, with the intermediate stored in bfloat16 ---------------
# As torch's own bfloat16 autograd and fused kernels such as Liger-Kernel's cross entropy do: the
# gradient of the logits is stored in bfloat16, then summed in fp32. The true gradient of the shift
# is 0, so torch's own bfloat16 result is off by "1e12" relative to it, and the yardstick falls back
# to torch in float32: without the rounding of the stored intermediate, a correct kernel failed
# (seen on an H100 on Liger-Kernel's fix for #1298, a pull request the gate called a regression).

SHIFT_BF16 = """
    def reference(x, b):
        return torch.log_softmax(x + b, -1)

    def make(error):
        class Shift(torch.autograd.Function):
            @staticmethod
            def forward(ctx, x, b):
                y = torch.log_softmax((x + b).float(), -1)
                ctx.save_for_backward(y)
                return y.to(x.dtype)

            @staticmethod
            def backward(ctx, g):
                (y,) = ctx.saved_tensors
                g = g.float()
                gx = (g - y.exp() * g.sum(-1, keepdim=True)).to(torch.bfloat16)  # stored in bf16
                gb = gx.float().sum(-1, keepdim=True)  # summed in fp32
                return gx, (gb + error * gx.float().abs().sum(-1, keepdim=True)).to(torch.bfloat16)

        return Shift

    STORED = make(0.0)
    # wrong by 5% of the terms' magnitude: many times what storing them in bf16 can do
    OFF = make(0.05)
    DECL = dict(dims={"rows": gg.Dim(1, 64), "classes": gg.Dim(2, 4096, reduction=True)},
                inputs={"x": gg.Tensor(("rows", "classes"), dtypes=["bfloat16"]),
                        "b": gg.Tensor(("rows", 1), dtype="like:x")},
                reference=reference, grads=["x", "b"])

    @gg.spec(name="shift_stored_bf16", **DECL)
    def shift_stored_bf16(x, b):
        return STORED.apply(x, b)

    @gg.spec(name="shift_off_bf16", **DECL)
    def shift_off_bf16(x, b):
        return OFF.apply(x, b)
"""


# Seed 1 draws what was a false red: x at offset 1000 in bfloat16 (ties), an expanded upstream gradient
# (every term the same), 4096 classes. Thousands of equal values round the same way, so the error adds up
# with the count of terms, while the storage envelope draws each rounding with a sign of its own (a random
# walk): the kernel was off by 1.55 where the envelope allowed 0.42 and torch's own bfloat16 result was off
# by 1.75. Torch's own low-precision result now counts where it is the size of the storage's rounding
# (``compare.storage_witness``); the 5%-off twin below still fails on every seed, seed 1 included.
@pytest.mark.parametrize("seed", range(3))
def test_a_zero_gradient_from_terms_stored_in_bf16_passes(seed: int, tmp_path: Path) -> None:
    root = _with_corpus(tmp_path, SHIFT_BF16)
    r = run(root, "gate_spec.py", "shift_stored_bf16", seed=seed, cases=16)
    assert r.status is Status.PASSED, "\n".join(errors(r))


@pytest.mark.parametrize("seed", range(3))
def test_a_zero_gradient_in_bf16_wrong_by_more_than_its_storage_fails(seed: int, tmp_path: Path) -> None:
    root = _with_corpus(tmp_path, SHIFT_BF16)
    r = run(root, "gate_spec.py", "shift_off_bf16", seed=seed, cases=16)
    bad = [f for f in r.findings if f.kind == "mismatch"]
    assert r.status is Status.FAILED and bad and all(f.details["output"] == "grad:b" for f in bad), "\n".join(errors(r))


def test_torch_counts_as_a_witness_of_the_storage_only_at_the_size_of_its_rounding() -> None:
    """The zero gradient (torch's bfloat16 off by 1.75, the envelope's draw 0.21): torch's result is
    taken. An overflow inside torch's float16 path (an output of 0 where the truth is 1, the envelope's
    draw 5e-4): it is not, and the envelope stays as drawn."""
    import torch

    from gpu_gate.judge.equivalence.compare import storage_witness

    ref = torch.tensor([7e-15, 1.0], dtype=torch.float64)
    low = torch.tensor([-1.75, 0.0], dtype=torch.float64)
    stored = torch.tensor([0.21, 1.0 + 5e-4], dtype=torch.float64)
    got = storage_witness(ref, low, stored)
    assert got.tolist() == [-1.75, 1.0 + 5e-4]
    # a smaller deviation of torch's never narrows the envelope; a non-finite one is never taken
    assert storage_witness(ref, torch.tensor([0.1, float("inf")], dtype=torch.float64), stored).tolist() == \
        stored.tolist()
    assert storage_witness(ref, None, stored) is stored
