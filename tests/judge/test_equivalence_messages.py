"""Messages that say what happened: a kernel the Triton interpreter cannot run is "could not
run under the Triton interpreter" with the traceback, not a refusal; a CPU run never talks of
streams; a size-1 output with a stride of 2 is compared, not an internal error."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from gpu_gate.judge.equivalence.engine import bitwise_equal
from gpu_gate.findings import JobResult, Severity, Status
from gpu_gate.inprocess import Context
from gpu_gate.judge.job import run_job
from gpu_gate.protocol.jobs import Job, SpecRef

HEADER = "import torch\nimport gpu_gate as gg\n"


def write_spec(root: Path, body: str) -> str:
    (root / "gate_spec.py").write_text(HEADER + textwrap.dedent(body))
    return "gate_spec.py"


def run(root: Path, spec: str, **options: object) -> JobResult:
    job = Job(id="j", check="equivalence", level="required", kernels=(), spec=SpecRef("gate_spec.py", spec),
              options={"cases": 8, "shrink": False, **options}, seed=0)
    return run_job(job, Context(repo_root=root, device="cpu", workdir=root))


# --- the Triton interpreter's limits -----------------------------------------------------

TRITON_SPEC = """
    import triton
    import triton.language as tl


    @triton.jit
    def _tanh_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
        offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        m = offs < n
        x = tl.load(x_ptr + offs, mask=m)
        y = tl.inline_asm_elementwise("tanh.approx.f32 $0, $1;", "=r,r", [x], dtype=tl.float32, is_pure=True, pack=1)
        tl.store(out_ptr + offs, y, mask=m)


    @triton.jit
    def _copy_asm_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
        offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        m = offs < n
        x = tl.load(x_ptr + offs, mask=m)
        y = tl.inline_asm_elementwise("mov.b16 $0, $1;", "=h,h", [x], dtype=tl.float16, is_pure=True, pack=1)
        tl.store(out_ptr + offs, y, mask=m)


    @triton.jit
    def _copy_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
        offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        m = offs < n
        tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=m), mask=m)


    def launch(kernel, x):
        x = x.contiguous()
        out = torch.empty_like(x)
        kernel[(triton.cdiv(x.numel(), 128),)](x, out, x.numel(), BLOCK=128)
        return out


    @gg.spec(dims={"n": gg.Dim(1, 1000)}, inputs={"x": gg.Tensor(("n",), dtypes=["float32"])},
             reference=lambda x: torch.tanh(x))
    def tanh_gate(x):
        return launch(_tanh_kernel, x)


    # fp16 goes through inline PTX (which the interpreter lacks), fp32 through plain Triton
    @gg.spec(dims={"n": gg.Dim(1, 1000)}, inputs={"x": gg.Tensor(("n",), dtypes=["float32", "float16"])},
             reference=lambda x: x.clone())
    def copy_gate(x):
        return launch(_copy_asm_kernel if x.dtype == torch.float16 else _copy_kernel, x)
"""

DRIVER = """
import json, sys
from pathlib import Path
from gpu_gate.inprocess import Context
from gpu_gate.judge.job import run_job
from gpu_gate.protocol.jobs import Job, SpecRef
root = Path(sys.argv[1])
job = Job(id="j", check="equivalence", level="required", kernels=(), spec=SpecRef("gate_spec.py", sys.argv[2]),
          options={"cases": 8, "shrink": False}, seed=0)
print(json.dumps(run_job(job, Context(repo_root=root, device="cpu", workdir=root)).to_json()))
"""


def _interpreted(root: Path, spec: str) -> dict[str, object]:
    env = {**os.environ, "TRITON_INTERPRET": "1"}
    p = subprocess.run([sys.executable, "-c", DRIVER, str(root), spec], capture_output=True, text=True, env=env,
                       timeout=600)
    assert p.returncode == 0, p.stderr
    return dict(json.loads(p.stdout.strip().splitlines()[-1]))


@pytest.mark.slow
def test_a_kernel_the_interpreter_cannot_run_is_not_run_with_the_traceback(tmp_path: Path) -> None:
    pytest.importorskip("triton")
    write_spec(tmp_path, TRITON_SPEC)
    r = _interpreted(tmp_path, "tanh_gate")
    assert r["status"] == "not_run"
    assert "could not run under the Triton interpreter" in str(r["reason"])
    findings = list(r["findings"])  # type: ignore[call-overload]
    assert not [f for f in findings if "refus" in f["kind"] or "refus" in f["message"]]
    (f,) = [f for f in findings if f["kind"] == "interpreter-unsupported"]
    assert "Traceback" in f["message"] and "_tanh_kernel" in f["details"]["traceback"]
    assert "inline_asm" in f["details"]["traceback"]
    # where: the kernel's line that the interpreter stopped at, not the wrapper's launch
    source = (tmp_path / "gate_spec.py").read_text().splitlines()
    assert f["file"] == "gate_spec.py" and "inline_asm_elementwise(" in source[f["line"] - 1], (f["file"], f["line"])
    assert f"at gate_spec.py:{f['line']}:" in f["message"].splitlines()[0]


@pytest.mark.slow
def test_cases_the_interpreter_cannot_run_are_a_warning_and_the_rest_are_judged(tmp_path: Path) -> None:
    pytest.importorskip("triton")
    write_spec(tmp_path, TRITON_SPEC)
    r = _interpreted(tmp_path, "copy_gate")
    assert r["status"] == "passed", r["findings"]
    findings = list(r["findings"])  # type: ignore[call-overload]
    (f,) = [f for f in findings if f["kind"] == "interpreter-unsupported"]
    assert f["severity"] == "warning" and "float16" in f["details"]["case"]
    assert "cases could not run under the Triton interpreter" in f["message"]
    assert "inline_asm not supported in interpreter mode" in f["message"]
    assert not [f for f in findings if f["kind"].startswith("refused")]
    assert 0 < int(r["cases"]) < 8  # type: ignore[call-overload]


AUTOTUNED_SPEC = """
    import triton
    import triton.language as tl


    @triton.autotune(configs=[triton.Config({"BLOCK": 64}), triton.Config({"BLOCK": 128}),
                              triton.Config({"BLOCK": 256})], key=["n"])
    @triton.jit
    def _scale_kernel(x_ptr, out_ptr, n, FACTOR: tl.constexpr, BLOCK: tl.constexpr):
        offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        m = offs < n
        tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=m) * FACTOR, mask=m)


    def scale(x, factor):
        x = x.contiguous()
        out = torch.empty_like(x)
        _scale_kernel[lambda meta: (triton.cdiv(x.numel(), meta["BLOCK"]),)](x, out, x.numel(), FACTOR=factor)
        return out


    @gg.spec(dims={"n": gg.Dim(1, 1000)}, inputs={"x": gg.Tensor(("n",), dtypes=["float32"])},
             reference=lambda x: x * 2)
    def double_gate(x):
        return scale(x, 2.0)


    @gg.spec(dims={"n": gg.Dim(1, 1000)}, inputs={"x": gg.Tensor(("n",), dtypes=["float32"])},
             reference=lambda x: x * 2)
    def wrong_gate(x):
        return scale(x, 3.0)
"""


@pytest.mark.slow
def test_an_autotuned_kernel_runs_under_the_interpreter_and_is_judged(tmp_path: Path) -> None:
    """Without a GPU the autotuner has no driver to time its configs with: it raised before the
    kernel started, and the job said the kernel refused its first case (a failure that blocks).
    Now the first config runs untimed, the kernel is judged on its values, and the job says so."""
    pytest.importorskip("triton")
    write_spec(tmp_path, AUTOTUNED_SPEC)
    good = _interpreted(tmp_path, "double_gate")
    assert good["status"] == "passed", good["findings"]
    (note,) = [f for f in good["findings"] if f["kind"] == "autotune-untimed"]  # type: ignore[union-attr]
    assert note["severity"] == "note" and "_scale_kernel ran their configs in turn" in note["message"]
    bad = _interpreted(tmp_path, "wrong_gate")
    assert bad["status"] == "failed"
    assert [f["kind"] for f in bad["findings"] if f["severity"] == "error"] == ["mismatch"], bad["findings"]


ONE_BAD_CONFIG_SPEC = """
    import triton
    import triton.language as tl


    @triton.autotune(configs=[triton.Config({"BLOCK": 64, "TAIL": True}), triton.Config({"BLOCK": 128, "TAIL": True}),
                              triton.Config({"BLOCK": 256, "TAIL": TAIL_OF_THE_LAST})], key=["n"])
    @triton.jit
    def _scale_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr, TAIL: tl.constexpr):
        offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
        # without TAIL, the last block stops at a whole multiple of 16: the tail stays unwritten
        m = offs < n if TAIL else offs < (n // 16) * 16
        tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=m) * 2.0, mask=m)


    def scale(x):
        x = x.contiguous()
        out = torch.zeros_like(x)
        _scale_kernel[lambda meta: (triton.cdiv(x.numel(), meta["BLOCK"]),)](x, out, x.numel())
        return out


    @gg.spec(dims={"n": gg.Dim(1, 1000)}, inputs={"x": gg.Tensor(("n",), dtypes=["float32"])},
             reference=lambda x: x * 2)
    def scale_gate(x):
        return scale(x)
"""


@pytest.mark.slow
def test_every_config_of_an_autotuned_kernel_is_reached_by_the_cases(tmp_path: Path) -> None:
    """The attack: of three configs, the last one drops the tail of its last block. Run as before
    (the first config for every key, as the interpreter's tie-break did), the gate passed it; a
    timed autotuner runs it only where it happens to win. Configs taken in turn, the cases reach
    it. The twin with three right configs passes."""
    pytest.importorskip("triton")
    write_spec(tmp_path, ONE_BAD_CONFIG_SPEC.replace("TAIL_OF_THE_LAST", "False"))
    bad = _interpreted(tmp_path, "scale_gate")
    assert bad["status"] == "failed", bad["findings"]
    assert "mismatch" in {f["kind"] for f in bad["findings"] if f["severity"] == "error"}  # type: ignore[union-attr]
    write_spec(tmp_path, ONE_BAD_CONFIG_SPEC.replace("TAIL_OF_THE_LAST", "True"))
    good = _interpreted(tmp_path, "scale_gate")
    assert good["status"] == "passed", good["findings"]


def test_configs_are_taken_in_turn_per_kernel_and_only_timed_when_the_policy_says(monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """The patched autotuner, driven as Triton drives it: prune, then "time" each pruned config
    in order; the least score wins. Each new key of a kernel takes the next config; two kernels
    keep their own turns; ``timed`` on a GPU leaves the autotuner alone."""
    autotuner = pytest.importorskip("triton.runtime.autotuner")
    from gpu_gate.worker import autotune

    Autotuner = autotuner.Autotuner
    ran: list[str] = []

    def timed(self, *args, config=None, **meta):  # type: ignore[no-untyped-def]
        """Triton's own timing, as a GPU answers it: a config too large for the GPU scores inf."""
        ran.append(config)
        return [float("inf")] * 3 if config.endswith("big") else [5.0, 4.0, 6.0]

    monkeypatch.setattr(Autotuner, "_bench", timed)
    monkeypatch.setattr(Autotuner, "prune_configs", lambda self, kwargs: list(self.configs))
    monkeypatch.delenv("TRITON_INTERPRET", raising=False)
    assert autotune.take_in_turn("timed") == [] and Autotuner._bench is timed
    autotune.take_in_turn("rotate")
    assert getattr(Autotuner._bench, "_gpu_gate_untimed", False)

    class Fake:  # the parts of an Autotuner the patch reads
        def __init__(self, name: str, configs: list[str]) -> None:
            self.configs, self.base_fn = configs, type(name, (), {"__name__": name})

    def pick(t: Fake) -> str:
        pruned = Autotuner.prune_configs(t, {})
        timings = {c: Autotuner._bench(t, config=c) for c in pruned}
        return min(timings, key=timings.get)

    # on a GPU: only the config whose turn it is runs (timed once, as the autotuner would); one that
    # does not fit passes the turn to the next
    a, b = Fake("_a_kernel", ["a0", "a1big", "a2"]), Fake("_b_kernel", ["b0", "b1"])
    assert [pick(a) for _ in range(4)] == ["a0", "a2", "a2", "a0"]
    assert ran == ["a0", "a1big", "a2", "a2", "a0"]
    assert [pick(b) for _ in range(3)] == ["b0", "b1", "b0"]
    # without a GPU nothing is timed
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    ran.clear()
    c = Fake("_c_kernel", ["c0", "c1big", "c2"])
    assert [pick(c) for _ in range(3)] == ["c0", "c1big", "c2"] and ran == []
    assert {"_a_kernel", "_b_kernel", "_c_kernel"} <= set(autotune.untimed())


# --- no streams on the CPU -----------------------------------------------------------------


def test_a_cpu_run_never_reports_an_unordered_stream(tmp_path: Path) -> None:
    """An in-place kernel returns its input, written: the input guard puts the input back after
    the call, which changed the returned tensor too. That is not a stream finishing late."""
    write_spec(tmp_path, """
        @gg.spec(dims={"n": gg.Dim(1, 300)}, inputs={"x": gg.Tensor(("n",))}, reference=lambda x: x * 2)
        def in_place(x):
            return x.mul_(2)
        """)
    r = run(tmp_path, "in_place")
    kinds = {f.kind for f in r.findings if f.severity is Severity.ERROR}
    assert "input-modified" in kinds and "output-aliases-input" in kinds
    # (a refusal of an input laid out as one broadcast element, where mul_ cannot write, is no stream)
    assert not [f for f in r.findings if "stream" in f.kind or "another stream" in f.message
                or "unordered" in f.message]


# --- a size-1 tensor with a stride of 2 ------------------------------------------------------


def test_bitwise_equal_takes_a_single_element_with_a_stride_of_2() -> None:
    import torch

    one = torch.full((2,), 3.0)[::2]
    assert one.shape == (1,) and one.stride() == (2,)
    assert bitwise_equal(one, torch.full((1,), 3.0))
    assert not bitwise_equal(one, torch.full((1,), -3.0))
    assert bitwise_equal(torch.zeros(3, 4).t()[:1, :1], torch.zeros(1, 1))


def test_a_size_1_output_with_a_stride_of_2_is_judged(tmp_path: Path) -> None:
    """A kernel that writes the sum into column 0 of a (rows, 2) buffer and returns that
    column: with one row, a single element with a stride of 2."""
    write_spec(tmp_path, """
        def first_column(x):
            buf = torch.zeros((x.shape[0], 2), dtype=x.dtype)
            buf[:, 0] = x.sum(-1)
            return buf[:, 0]

        @gg.spec(dims={"rows": gg.Dim(1, 1), "n": gg.Dim(1, 300)}, inputs={"x": gg.Tensor(("rows", "n"))},
                 reference=lambda x: x.sum(-1))
        def column_sum(x):
            return first_column(x)
        """)
    r = run(tmp_path, "column_sum")
    assert r.status is Status.PASSED, [f.message for f in r.findings]
