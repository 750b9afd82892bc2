"""The equivalence check as a user sees it: refusals, guards, tolerances from the spec and
the policy, a broken reference, bitwise determinism, the dtype skipped under the Triton
interpreter, the harness subprocess and the growth table the Markdown report draws."""
from __future__ import annotations

import dataclasses

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from gpu_gate.findings import JobResult, Severity, Status
from gpu_gate.inprocess import Context
from gpu_gate.judge.job import run_job
from gpu_gate.protocol.jobs import Job, SpecRef

HEADER = "import torch\nimport gpu_gate as gg\n"
ELEMENTWISE = ('dims={"rows": gg.Dim(1, 32), "n": gg.Dim(1, 300)}, '
               'inputs={"x": gg.Tensor(("rows", "n"), dtypes=["float32", "float16"])}')


def write_spec(root: Path, body: str, name: str = "gate_spec.py") -> str:
    (root / name).write_text(HEADER + textwrap.dedent(body))
    return name


def run(root: Path, file: str, spec: str, seed: int = 0, **options: object) -> JobResult:
    opts = {"cases": 12, "shrink": False, **options}
    job = Job(id="j", check="equivalence", level="required", kernels=(), spec=SpecRef(file, spec), options=opts,
              seed=seed)
    return run_job(job, Context(repo_root=root, device="cpu", workdir=root))


def kinds(r: JobResult, severity: Severity | None = None) -> set[str]:
    return {f.kind for f in r.findings if severity is None or f.severity is severity}


def test_a_loud_refusal_of_some_inputs_is_a_warning(tmp_path: Path) -> None:
    f = write_spec(tmp_path, f"""
        @gg.spec({ELEMENTWISE}, reference=lambda x: x * 2)
        def picky(x):
            if not x.is_contiguous():
                raise ValueError("input must be contiguous")
            return x * 2
        """)
    r = run(tmp_path, f, "picky")
    assert r.status is Status.PASSED
    (w,) = [x for x in r.findings if x.kind == "refused"]
    assert w.severity is Severity.WARNING and "ValueError: input must be contiguous" in w.message
    assert w.repro and "--case" in w.repro


def test_refusing_the_canonical_case_fails_because_nothing_was_verified(tmp_path: Path) -> None:
    f = write_spec(tmp_path, f"""
        @gg.spec({ELEMENTWISE}, reference=lambda x: x * 2)
        def never(x):
            raise NotImplementedError("no kernel for this GPU")
        """)
    r = run(tmp_path, f, "never")
    assert r.status is Status.FAILED and kinds(r, Severity.ERROR) == {"refused-canonical"}
    assert "nothing was verified" in r.findings[0].message and r.cases == 1


def test_writing_past_the_end_of_a_gg_empty_output_is_caught(tmp_path: Path) -> None:
    f = write_spec(tmp_path, f"""
        @gg.spec({ELEMENTWISE}, reference=lambda x: x * 2)
        def overrun(x):
            out = gg.empty_like(x)
            out.copy_(x * 2)
            flat = out.view(-1)
            torch.as_strided(flat, (flat.numel() + 4,), (1,), flat.storage_offset()).fill_(0)[-4:]
            out.copy_(x * 2)
            return out
        """)
    r = run(tmp_path, f, "overrun")
    assert "out-of-bounds-write" in kinds(r, Severity.ERROR)


def test_writing_past_an_input_is_out_of_bounds_not_just_modified(tmp_path: Path) -> None:
    f = write_spec(tmp_path, f"""
        @gg.spec({ELEMENTWISE}, reference=lambda x: x * 2)
        def scribble(x):
            y = x * 2
            if x.is_contiguous():
                flat = torch.as_strided(x, (x.numel() + 8,), (1,), x.storage_offset())
                flat[-8:] = 0
            return y
        """)
    r = run(tmp_path, f, "scribble")
    assert "out-of-bounds-write" in kinds(r, Severity.ERROR)
    assert any(x.details.get("input") == "x" for x in r.findings)


def test_the_spec_tolerance_overrides_the_policy(tmp_path: Path) -> None:
    f = write_spec(tmp_path, f"""
        @gg.spec({ELEMENTWISE}, reference=lambda x: x * 3, tolerance=gg.Tolerance(atol=1e-2, rtol=1e-2))
        def loose(x):
            return (x.double() * 3 * (1 + 1e-3)).to(x.dtype)

        @gg.spec({ELEMENTWISE}, reference=lambda x: x * 3)
        def strict(x):
            return (x.double() * 3 * (1 + 1e-3)).to(x.dtype)
        """)
    assert run(tmp_path, f, "loose").status is Status.PASSED
    assert kinds(run(tmp_path, f, "strict"), Severity.ERROR) == {"mismatch"}
    policy_fixed = {"tolerance": {"baseline_factor": 2.0, "atol": 1e-2, "rtol": 1e-2}}
    assert run(tmp_path, f, "strict", **policy_fixed).status is Status.PASSED
    policy_tight = {"tolerance": {"atol": 0.0, "rtol": 1e-6}}
    assert run(tmp_path, f, "loose", **policy_tight).status is Status.PASSED  # the spec wins


def test_a_larger_baseline_factor_from_the_policy_lets_a_slightly_worse_kernel_pass(tmp_path: Path) -> None:
    f = write_spec(tmp_path, """
        @gg.spec(dims={"n": gg.Dim(64, 300)}, inputs={"x": gg.Tensor(("n",), dtypes=["float16"], dists=["normal"])},
                 reference=lambda x: x * 3)
        def twice_rounded(x):
            return (x.double() * 3 * (1 + 2 ** -9)).to(torch.float16)  # about four roundings off
        """)
    assert run(tmp_path, f, "twice_rounded").status is Status.FAILED
    assert run(tmp_path, f, "twice_rounded", tolerance={"baseline_factor": 8.0}).status is Status.PASSED


def test_a_reference_that_raises_is_the_spec_s_fault(tmp_path: Path) -> None:
    f = write_spec(tmp_path, f"""
        @gg.spec({ELEMENTWISE}, reference=lambda x: x.no_such_method())
        def fine(x):
            return x
        """)
    r = run(tmp_path, f, "fine")
    assert r.status is Status.ERROR
    (e,) = r.findings
    assert e.kind == "reference-error" and "AttributeError" in e.message and f"fix the reference in {f}" in e.message


def test_deterministic_specs_must_agree_bitwise(tmp_path: Path) -> None:
    f = write_spec(tmp_path, f"""
        import itertools
        _calls = itertools.count()

        def jitter(x):
            y = x.double() * 2
            y.view(-1)[0] += 1e-9 * (next(_calls) % 2)  # far below the tolerance, not bitwise stable
            return y.to(x.dtype)

        @gg.spec({ELEMENTWISE.replace('"float32", "float16"', '"float64"')}, reference=lambda x: x * 2,
                 deterministic=True)
        def bitwise(x):
            return jitter(x)

        @gg.spec({ELEMENTWISE.replace('"float32", "float16"', '"float64"')}, reference=lambda x: x * 2)
        def tolerant(x):
            return jitter(x)
        """)
    r = run(tmp_path, f, "bitwise", tolerance={"atol": 1e-6, "rtol": 1e-6})
    assert "unstable" in kinds(r, Severity.ERROR)
    assert any("deterministic=True" in x.message for x in r.findings)
    assert run(tmp_path, f, "tolerant", tolerance={"atol": 1e-6, "rtol": 1e-6}).status is Status.PASSED


TRITON_BF16_SPECS = """
    import triton.language as tl  # the rule applies to specs whose code uses Triton

    @gg.spec(dims={"n": gg.Dim(1, 64)}, inputs={"x": gg.Tensor(("n",), dtypes=["bfloat16", "float32"])},
             reference=lambda x: x + 1)
    def plus(x):
        return x + 1

    @gg.spec(dims={"n": gg.Dim(1, 64)}, inputs={"x": gg.Tensor(("n",), dtypes=["bfloat16"])},
             reference=lambda x: x + 1)
    def bf16_only(x):
        return x + 1
    """


def test_bf16_runs_under_the_adapted_triton_interpreter(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    f = write_spec(tmp_path, TRITON_BF16_SPECS)
    r = run(tmp_path, f, "plus")
    assert r.status is Status.PASSED and not [x for x in r.findings if x.kind == "dtype-not-run"]
    assert set(r.extra.coverage["inputs"]["x"]["dtype"]) == {"bfloat16", "float32"}


def test_bf16_is_skipped_with_a_reason_where_the_interpreter_is_not_adapted(tmp_path: Path,
                                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    import gpu_gate.worker.interpreter as adapt

    monkeypatch.setenv("TRITON_INTERPRET", "1")
    monkeypatch.setattr(adapt, "install", lambda: [])  # a Triton whose interpreter gpu-gate cannot adapt
    f = write_spec(tmp_path, TRITON_BF16_SPECS)
    r = run(tmp_path, f, "plus")
    assert r.status is Status.PASSED
    (note,) = [x for x in r.findings if x.kind == "dtype-not-run"]
    assert note.severity is Severity.NOTE and "bfloat16 cases not run" in note.message and "interpreter" in note.message
    assert set(r.extra.coverage["inputs"]["x"]["dtype"]) == {"float32"}
    only = run(tmp_path, f, "bf16_only")
    assert only.status is Status.NOT_RUN and "interpreter" in (only.reason or "")


def test_plain_torch_specs_keep_bf16_under_the_interpreter_even_though_torch_imports_triton(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import sys

    import torch._dynamo  # noqa: F401 - imports Triton wherever it is installed

    monkeypatch.setenv("TRITON_INTERPRET", "1")
    f = write_spec(tmp_path, """
        @gg.spec(dims={"n": gg.Dim(1, 64)}, inputs={"x": gg.Tensor(("n",), dtypes=["bfloat16"])},
                 reference=lambda x: x + 1)
        def torch_bf16(x):
            return x + 1
        """, name="torch_spec.py")
    r = run(tmp_path, f, "torch_bf16")
    assert "triton" in sys.modules
    assert r.status is Status.PASSED and not [x for x in r.findings if x.kind == "dtype-not-run"]
    assert set(r.extra.coverage["inputs"]["x"]["dtype"]) == {"bfloat16"}


def test_a_spec_that_does_not_run_on_this_device_is_not_run(tmp_path: Path) -> None:
    f = write_spec(tmp_path, f"""
        @gg.spec({ELEMENTWISE}, reference=lambda x: x, devices=["cuda"])
        def gpu_only(x):
            return x
        """)
    r = run(tmp_path, f, "gpu_only")
    assert r.status is Status.NOT_RUN and "runs only on cuda" in (r.reason or "")


def test_dim_args_reach_the_candidate_and_the_reference(tmp_path: Path) -> None:
    f = write_spec(tmp_path, """
        @gg.spec(dims={"tokens": gg.Dim(1, 200), "vocab": gg.Dim(1, 50), "d": gg.Dim(1, 8)},
                 inputs={"g": gg.Tensor(("tokens", "d")), "ids": gg.Index(("tokens",), high="vocab")},
                 reference=lambda g, ids, vocab: torch.zeros(vocab, g.shape[1], dtype=g.dtype).index_add_(0, ids, g),
                 dim_args=["vocab"])
        def scatter(g, ids, vocab):
            return torch.zeros(vocab, g.shape[1], dtype=g.dtype).index_add_(0, ids, g.double().to(g.dtype))
        """)
    r = run(tmp_path, f, "scatter")
    assert r.status is Status.PASSED, [x.message for x in r.findings]


def test_a_missing_gradient_says_how_to_provide_one(tmp_path: Path) -> None:
    f = write_spec(tmp_path, f"""
        @gg.spec({ELEMENTWISE}, reference=lambda x: x * 2, grads=["x"])
        def no_backward(x):
            return (x.detach() * 2)
        """)
    r = run(tmp_path, f, "no_backward")
    (m,) = [x for x in r.findings if x.kind == "missing-output"]
    assert "no gradient for 'x'" in m.message and "torch.autograd.Function" in m.message


def test_in_process_runs_restore_torch_settings(tmp_path: Path) -> None:
    import torch

    f = write_spec(tmp_path, f"""
        @gg.spec({ELEMENTWISE}, reference=lambda x: x * 2)
        def double(x):
            return x * 2
        """)
    import torch.utils.deterministic as det

    before = (torch.are_deterministic_algorithms_enabled(), det.fill_uninitialized_memory)
    assert run(tmp_path, f, "double").status is Status.PASSED
    assert (torch.are_deterministic_algorithms_enabled(), det.fill_uninitialized_memory) == before


def test_the_harness_subprocess_writes_a_result(tmp_path: Path) -> None:
    f = write_spec(tmp_path, f"""
        @gg.spec({ELEMENTWISE}, reference=lambda x: x * 2)
        def wrong(x):
            return x * 2 + (x.abs() > 1).to(x.dtype)
        """)
    job = Job(id="equivalence:wrong", check="equivalence", level="required", kernels=(), spec=SpecRef(f, "wrong"),
              options={"cases": 6, "shrink": True, "shrink_budget_s": 20}, seed=3)
    job.write(tmp_path / "job.json")
    env = {**os.environ, "GPU_GATE_REPO_ROOT": str(tmp_path), "GPU_GATE_DEVICE": "cpu"}
    p = subprocess.run([sys.executable, "-m", "gpu_gate.inprocess", "job.json", "result.json"], cwd=tmp_path, env=env,
                       capture_output=True, text=True, timeout=300, check=False)
    assert p.returncode == 0, p.stderr
    r = JobResult.from_json(json.loads((tmp_path / "result.json").read_text()))
    assert r.status is Status.FAILED
    (m,) = [x for x in r.findings if x.kind == "mismatch"]
    assert "shrunk from" in m.message and m.case and m.case.endswith("s")
    assert r.extra.seed == 3 and r.extra.coverage["cases"] == 6


def test_the_growth_table_is_what_the_markdown_report_draws(tmp_path: Path) -> None:
    from gpu_gate.report.mdgrowth import growth_block

    corpus = Path(__file__).parent.parent / "corpus"
    job = Job(id="j", check="equivalence", level="required", kernels=(), spec=SpecRef("rowsum.py", "rowsum_bf16_acc"),
              options={"cases": 4, "shrink": False}, seed=1)
    r = run_job(job, Context(repo_root=corpus, device="cpu", workdir=tmp_path))
    g = r.extra.growth
    text = growth_block(r, g)
    assert "xychart-beta" in text and "262144" in text
    assert "grows faster with size than the baseline" in text
    (f,) = [x for x in r.findings if x.kind == "error-growth"]
    assert f.repro and "--growth n:" in f.repro and "slope" in f.message


def test_when_torch_s_own_low_precision_path_breaks_down_the_baseline_is_float32(tmp_path: Path) -> None:
    # x**2 overflows float16 at values near 1000: torch's float16 reference returns zeros,
    # which must not become a yardstick that lets any answer through
    f = write_spec(tmp_path, """
        RMS = dict(dims={"rows": gg.Dim(2, 8), "n": gg.Dim(16, 300)},
                   inputs={"x": gg.Tensor(("rows", "n"), dtypes=["float16"], dists=["offset"])},
                   reference=lambda x: x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6))

        @gg.spec(**RMS)
        def fp32_inside(x):
            xf = x.float()
            return (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + 1e-6)).to(x.dtype)

        @gg.spec(**RMS)
        def like_torch_fp16(x):
            return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6)
        """)
    good = run(tmp_path, f, "fp32_inside")
    assert good.status is Status.PASSED, [x.message for x in good.findings]
    bad = run(tmp_path, f, "like_torch_fp16")
    # the extremes come first now: the overflow can show as a constant output and as a mismatch
    found = [x for x in bad.findings if x.kind in ("mismatch", "constant-output")]
    assert bad.status is Status.FAILED and found, [x.message for x in bad.findings]
    assert all("baseline is torch in float32" in m.message or m.kind == "constant-output" for m in found)



def test_under_a_sanitizer_a_wrong_result_is_a_note_for_the_equivalence_job_to_judge(tmp_path: Path) -> None:
    f = write_spec(tmp_path, f"""
        @gg.spec({ELEMENTWISE}, reference=lambda x: x * 2)
        def off_by_one(x):
            return x * 2 + 1
        """)
    plain = run(tmp_path, f, "off_by_one")
    assert plain.status is Status.FAILED and "mismatch" in kinds(plain, Severity.ERROR)
    sanitized = run(tmp_path, f, "off_by_one", sanitizer=True)
    assert sanitized.status is Status.PASSED and not kinds(sanitized, Severity.ERROR)
    (note,) = [x for x in sanitized.findings if x.kind == "mismatch"]
    assert note.severity is Severity.NOTE and "compute-sanitizer" in note.message


class _FakeStream:
    def __init__(self, stream_id: int) -> None:
        self.stream_id = stream_id
        self.cuda_stream = 0x1000 + stream_id  # the raw cudaStream_t


@dataclasses.dataclass
class _FakeCuda:
    """torch.cuda's stream calls, recorded: the current stream, and each sleep as (stream, cycles)."""

    caller: _FakeStream
    current: list[_FakeStream]
    sleeps: list[tuple[int, int]]


@pytest.fixture
def fake_cuda(monkeypatch: pytest.MonkeyPatch) -> _FakeCuda:
    import torch

    fc = _FakeCuda(_FakeStream(0), [], [])
    fc.current.append(fc.caller)
    monkeypatch.setattr(torch.cuda, "current_stream", lambda device=None: fc.current[0])
    monkeypatch.setattr(torch.cuda, "set_stream", lambda s: fc.current.__setitem__(0, s))
    monkeypatch.setattr(torch.cuda, "_sleep", lambda cycles: fc.sleeps.append((fc.current[0].stream_id, cycles)))
    monkeypatch.setattr(torch.cuda, "ExternalStream", lambda handle: _FakeStream(handle - 0x1000), raising=False)
    return fc


def test_side_streams_delay_only_switches_away_from_the_caller_and_undo_their_hooks(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The watch queues a GPU sleep on every stream the candidate switches to (other than the
    caller's), so unordered work lands late every time; afterwards torch is as it was."""
    import torch

    from gpu_gate.worker.watch import SIDE_STREAM_DELAY_CYCLES, SideStreams

    caller, side = _FakeStream(0), _FakeStream(7)
    current = [caller]
    sleeps: list[tuple[int, int]] = []
    monkeypatch.setattr(torch.cuda, "current_stream", lambda device=None: current[0])
    monkeypatch.setattr(torch.cuda, "set_stream", lambda s: current.__setitem__(0, s))
    monkeypatch.setattr(torch.cuda, "_sleep", lambda cycles: sleeps.append((current[0].stream_id, cycles)))
    original_set_stream = torch.cuda.set_stream
    had_enter = "__enter__" in vars(torch.cuda.Stream)

    with SideStreams("cpu") as off:
        torch.cuda.set_stream(side)
    assert sleeps == [] and off.used == set()

    current[0] = caller
    with SideStreams("cuda") as watch:
        torch.cuda.set_stream(side)
        torch.cuda.set_stream(caller)
        torch.cuda.set_stream(None)
    assert sleeps == [(7, SIDE_STREAM_DELAY_CYCLES)]
    assert watch.used == {7}
    assert torch.cuda.set_stream is original_set_stream
    assert ("__enter__" in vars(torch.cuda.Stream)) == had_enter


def test_a_stream_made_current_through_torchs_c_entry_point_is_delayed_too(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Every stream API of torch ends in ``torch._C._cuda_setStream``; a candidate that calls it
    directly switches streams without ``torch.cuda.set_stream``. The watch sits on the C entry point,
    so that switch is delayed like any other, once per stream and call, and torch is restored."""
    import torch

    from gpu_gate.worker.watch import SIDE_STREAM_DELAY_CYCLES, SideStreams

    caller = _FakeStream(0)
    current = [0]
    sleeps: list[tuple[int, int]] = []

    def raw(stream_id: int = 0, device_index: int = 0, device_type: int = 1) -> None:
        current[0] = stream_id

    monkeypatch.setattr(torch.cuda, "current_stream", lambda device=None: caller)
    monkeypatch.setattr(torch._C, "_cuda_setStream", raw, raising=False)
    monkeypatch.setattr(torch.cuda, "_sleep", lambda cycles: sleeps.append((current[0], cycles)))
    with SideStreams("cuda") as watch:
        torch._C._cuda_setStream(stream_id=11, device_index=0, device_type=1)
        torch._C._cuda_setStream(stream_id=0, device_index=0, device_type=1)
        torch._C._cuda_setStream(stream_id=11, device_index=0, device_type=1)
        torch._C._cuda_setStream(12, 0, 1)
    assert sleeps == [(11, SIDE_STREAM_DELAY_CYCLES), (12, SIDE_STREAM_DELAY_CYCLES)]
    assert watch.used == {11, 12}
    assert torch._C._cuda_setStream is raw


def test_a_gg_cuda_launch_on_an_explicit_side_stream_is_delayed_once_per_call(fake_cuda: _FakeCuda) -> None:
    """`kernel(..., stream=side)` switches no torch stream; the launcher tells the watch, which
    queues one sleep on that stream (not on the caller's) and leaves the caller's stream current."""
    from gpu_gate.worker.watch import SIDE_STREAM_DELAY_CYCLES, SideStreams, before_launch

    caller, current, sleeps = fake_cuda.caller, fake_cuda.current, fake_cuda.sleeps
    before_launch(0x1009)  # outside the harness: nothing
    assert sleeps == []
    with SideStreams("cuda") as watch:
        before_launch(caller.cuda_stream)
        before_launch(0x1009)
        before_launch(0x1009)
        before_launch(0x100A)
        assert current[0] is caller
    assert sleeps == [(9, SIDE_STREAM_DELAY_CYCLES), (10, SIDE_STREAM_DELAY_CYCLES)]
    assert watch.used == {9, 10}
    before_launch(0x100B)  # the watch is over
    assert len(sleeps) == 2


def test_making_a_cupy_stream_current_is_delayed_like_a_torch_switch(monkeypatch: pytest.MonkeyPatch,
                                                                      fake_cuda: _FakeCuda) -> None:
    """CuPy's own kernels launch on CuPy's current stream: `with s:` and `s.use()` on a CuPy
    stream queue the sleep there (once per stream and call), and CuPy is as it was afterwards."""
    import sys
    import types

    from gpu_gate.worker.watch import SIDE_STREAM_DELAY_CYCLES, SideStreams

    class FakeCupyStream:
        def __init__(self, ptr: int) -> None:
            self.ptr = ptr

        def __enter__(self) -> FakeCupyStream:
            return self

        def __exit__(self, *exc: object) -> None:
            pass

        def use(self) -> FakeCupyStream:
            return self

    fake = types.ModuleType("cupy")
    fake.cuda = types.SimpleNamespace(Stream=FakeCupyStream)  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "cupy", fake)
    caller, current, sleeps = fake_cuda.caller, fake_cuda.current, fake_cuda.sleeps
    original = dict(vars(FakeCupyStream))

    with SideStreams("cuda") as watch:
        with FakeCupyStream(0x1005):
            pass
        FakeCupyStream(0x1005).use()
        FakeCupyStream(0x1006).use()
        with FakeCupyStream(caller.cuda_stream):
            pass
    assert sleeps == [(5, SIDE_STREAM_DELAY_CYCLES), (6, SIDE_STREAM_DELAY_CYCLES)]
    assert watch.used == {5, 6} and current[0] is caller
    assert dict(vars(FakeCupyStream)) == original


def test_the_candidate_meets_strided_and_expanded_upstream_gradients_and_a_correct_one_passes(tmp_path: Path) -> None:
    f = write_spec(tmp_path, """
        SEEN = set()

        class Double(torch.autograd.Function):
            @staticmethod
            def forward(ctx, x):
                return x * 2

            @staticmethod
            def backward(ctx, g):
                SEEN.add(g.stride()[0] == 0 and g.shape[0] > 1 and "expanded" or
                         (not g.is_contiguous() and "strided") or "contiguous")
                return g * 2

        @gg.spec(dims={"rows": gg.Dim(2, 32), "n": gg.Dim(2, 300)},
                 inputs={"x": gg.Tensor(("rows", "n"), dtypes=["float32"])}, reference=lambda x: x * 2,
                 grads=["x"])
        def double(x):
            return Double.apply(x)
        """)
    r = run(tmp_path, f, "double", cases=4)
    assert r.status is Status.PASSED, [x.message for x in r.findings]
    import sys
    seen = next(m for n, m in sys.modules.items() if n.startswith("_spec_") and hasattr(m, "SEEN")).SEEN
    assert {"contiguous", "strided", "expanded"} <= seen
    assert set(r.extra.coverage["grad_layout"]) == {"contiguous", "strided", "expanded"}


MODEL_SIZE_SPEC = """
    def scale_rows(x):
        n = x.shape[-1]
        if n % 512 == 0 and n & (n - 1):  # a block configuration picked for 1536, 2560, 3072, ... is wrong
            return x * 0.5 + x[..., :1] * 1e-3
        return x * 0.5

    @gg.spec(dims={"rows": gg.Dim(1, 16), "hidden": gg.Dim(1, 8192)},
             inputs={"x": gg.Tensor(("rows", "hidden"), dtypes=["float32"])}, reference=lambda x: x * 0.5)
    def model_size_bug(x):
        return scale_rows(x)
"""


@pytest.mark.parametrize("seed", range(5))
def test_a_kernel_wrong_only_at_common_model_sizes_is_caught(seed: int, tmp_path: Path) -> None:
    f = write_spec(tmp_path, MODEL_SIZE_SPEC)
    r = run(tmp_path, f, "model_size_bug", seed=seed, cases=32, growth=False)
    bad = [x for x in r.findings if x.kind == "mismatch"]
    assert r.status is Status.FAILED and bad, [x.message for x in r.findings]
    assert bad[0].details["shape"][1] in (1536, 2560, 3072, 3584, 5120, 6144, 7168)


def test_the_growth_sweep_runs_on_positive_and_on_signed_data(tmp_path: Path) -> None:
    from gpu_gate.judge.equivalence.growth import signs

    f = write_spec(tmp_path, """
        @gg.spec(dims={"rows": gg.Dim(1, 4), "n": gg.Dim(1, 1 << 14, reduction=True)},
                 inputs={"x": gg.Tensor(("rows", "n"), dtypes=["float32"])}, reference=lambda x: x.sum(-1))
        def rowsum(x):
            return x.sum(-1)

        @gg.spec(dims={"rows": gg.Dim(1, 4), "n": gg.Dim(1, 1 << 14, reduction=True)},
                 inputs={"x": gg.Tensor(("rows", "n"), dtypes=["float32"], dists=["uniform_pos"])},
                 reference=lambda x: x.sum(-1))
        def positive_only(x):
            return x.sum(-1)
        """)
    r = run(tmp_path, f, "rowsum", cases=2, max_reduction=1 << 14)
    curves = r.extra.growth["curves"]
    assert sorted(c["data"] for c in curves) == ["positive", "signed"]
    assert all(not c["flagged"] and not c["jump"] for c in curves)
    import sys
    mod = next(m for n, m in sys.modules.items() if n.startswith("_spec_") and hasattr(m, "positive_only"))
    assert signs(mod.positive_only) == ["positive"]  # the spec pins positive values: no signed sweep


@pytest.mark.parametrize("cand, base, jump", [
    ([1e-3, 1e-3, 1e-3, 1e-3, 1.8e-3], [1e-3] * 5, True),  # 1.8x torch only at the longest length
    ([0.4e-3, 0.5e-3, 0.5e-3, 0.6e-3, 1.6e-3], [1e-3] * 5, True),
    ([2e-3, 2e-3, 2e-3, 2e-3, 2.2e-3], [1e-3] * 5, False),  # uniformly 2x: the per-case rule's business
    ([1e-3, 1e-3, 1e-3, 1e-3, 1.4e-3], [1e-3] * 5, False),
    ([1e-3, 1e-3, 1e-3, 1e-3, 0.9e-3], [1e-3] * 5, False),
])
def test_a_jump_at_the_longest_length_is_flagged(cand: list[float], base: list[float], jump: bool) -> None:
    from gpu_gate.judge.equivalence.growth import jumped

    assert jumped(cand, base) is jump
