"""The CUDA corpus (tests/gpu/corpus_cuda) without a GPU: every .cu file compiles with NVRTC for
sm_90, with and without the CUDA toolkit's fp16/bf16 headers, and defines exactly the kernels
that cu_kernels.KERNELS lists. Every gate spec is then called on CPU tensors in each layout and
dtype it declares, with gg.cuda.load replaced by a recorder: each kernel it would launch must
exist in the PTX, take as many parameters as are passed, each of the passed kind (pointer,
int32, int64, float32), with float tensors of the dtype the kernel's name says, and a launch
shape the kernel can run with. The GPU run itself is tests/gpu/test_equivalence_cuda_gpu.py."""
from __future__ import annotations

import functools
import importlib.util
import os
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy
import pytest
import torch

import gpu_gate as gg
from gpu_gate.judge.checks import compile as compile_check
from gpu_gate.cuda import nvcc
from gpu_gate.protocol.cases import ScheduleOptions, schedule
from gpu_gate.protocol.inputs import materialize
from gpu_gate.findings import Status
from gpu_gate.inprocess import Context
from gpu_gate.protocol.jobs import Job
from gpu_gate.spec import Spec, specs_in_module

CORPUS = Path(__file__).parent.parent / "gpu" / "corpus_cuda"
ARCH = 90
FALLBACK = "-DCU_CORPUS_NO_CUDA_HEADERS"  # common.cuh's stand-in for <cuda_fp16.h>/<cuda_bf16.h>
ENTRY = re.compile(r"^\.visible \.entry (\w+)\((.*?)\)", re.S | re.M)
PARAM = re.compile(r"\.param \.(\w+)")


def _nvrtc_missing() -> str | None:
    try:
        from cupy.cuda import nvrtc
    except ImportError as exc:
        return f"NVRTC is reached through CuPy, which does not import here: {exc}"
    try:
        nvrtc.getVersion()
    except Exception as exc:  # noqa: BLE001 - the NVRTC library is not installed
        return f"the NVRTC library is not installed: {exc}"
    return None


@pytest.fixture(scope="module")
def nvrtc_ok() -> None:
    why = _nvrtc_missing()
    if why:
        pytest.skip(why)


@pytest.fixture(scope="module")
def kernels_module() -> Iterator[Any]:
    sys.path.insert(0, str(CORPUS))
    sys.modules.pop("cu_kernels", None)
    try:
        import cu_kernels

        yield cu_kernels
    finally:
        sys.path.remove(str(CORPUS))
        sys.modules.pop("cu_kernels", None)


@functools.cache
def entries(file: str, fallback: bool) -> dict[str, list[str]]:
    """Kernel name -> PTX parameter types (u64, u32, f32, ...) of one corpus file."""
    ptx = gg.cuda.compile_ptx(CORPUS / file, ARCH, options=[FALLBACK] if fallback else [])
    assert f".target sm_{ARCH}" in ptx
    return {m.group(1): PARAM.findall(m.group(2)) for m in ENTRY.finditer(ptx)}


def test_every_cu_file_is_listed(kernels_module: Any) -> None:
    assert sorted(p.name for p in CORPUS.glob("*.cu")) == sorted(kernels_module.KERNELS)


@pytest.mark.parametrize("fallback", [False, True], ids=["cuda-headers", "no-cuda-headers"])
@pytest.mark.parametrize("file", sorted(p.name for p in CORPUS.glob("*.cu")))
def test_each_file_defines_exactly_its_kernels(nvrtc_ok: None, kernels_module: Any, file: str,
                                               fallback: bool) -> None:
    assert sorted(entries(file, fallback)) == sorted(kernels_module.KERNELS[file])


@pytest.mark.parametrize("file", sorted(p.name for p in CORPUS.glob("*.cu")))
def test_headers_and_stand_in_give_the_same_kernels(nvrtc_ok: None, file: str) -> None:
    assert entries(file, False) == entries(file, True)


# --- every launch a gate makes, checked against the PTX --------------------------------------
PARAM_KIND = {"u64": "u64", "s64": "u64", "b64": "u64", "u32": "u32", "s32": "u32", "b32": "u32", "f32": "f32"}
DTYPE_OF_SUFFIX = {"f32": torch.float32, "f16": torch.float16, "bf16": torch.bfloat16}


def _arg_kind(arg: Any) -> str:
    if isinstance(arg, torch.Tensor):
        return "u64"  # a device pointer
    if isinstance(arg, (bool, int, float)):
        raise AssertionError(f"a Python {type(arg).__name__} reached a kernel: wrap it in gg.cuda.int32/int64/float32")
    if isinstance(arg, (numpy.int64, numpy.uint64)):
        return "u64"
    if isinstance(arg, (numpy.int32, numpy.uint32)):
        return "u32"
    if isinstance(arg, numpy.float32):
        return "f32"
    raise AssertionError(f"unexpected kernel argument of type {type(arg).__name__}")


class Recorder:
    """Stands in for gg.cuda.load: checks each launch against the kernel's PTX signature."""

    def __init__(self) -> None:
        self.launched: list[str] = []

    def load(self, path: Any, kernel_name: str, **_: Any) -> Any:
        file = Path(path)
        assert file.parent.resolve() == CORPUS.resolve(), f"{path} is not in the CUDA corpus"
        known = entries(file.name, False)
        assert kernel_name in known, f"{file.name} defines no kernel {kernel_name!r} (it has {sorted(known)})"
        return functools.partial(self.launch, kernel_name, known[kernel_name])

    def launch(self, name: str, params: list[str], grid: Any, block: Any, *args: Any, **_: Any) -> None:
        grid = (grid,) if isinstance(grid, int) else tuple(grid)
        block = (block,) if isinstance(block, int) else tuple(block)
        assert all(isinstance(d, int) and d >= 1 for d in (*grid, *block)), (name, grid, block)
        assert grid[0] < 2**31 and all(d <= 65535 for d in grid[1:]), (name, grid)
        threads = numpy.prod(block)
        assert threads <= 1024 and threads % 32 == 0, f"{name}: the block reductions need whole warps, got {block}"
        kinds = [_arg_kind(a) for a in args]
        want = [PARAM_KIND.get(p, p) for p in params]
        assert kinds == want, f"{name}: passed {kinds}, the kernel takes {want}"
        dtype = DTYPE_OF_SUFFIX[name.rsplit("_", 1)[1]]
        for i, a in enumerate(args):
            if isinstance(a, torch.Tensor):
                assert a.dtype in (dtype, torch.int64), f"{name}: argument {i} is {a.dtype}, the kernel reads {dtype}"
                assert a.dtype.is_floating_point or name.startswith(("embedding", "ce_")), (name, i, a.dtype)
        self.launched.append(name)


@pytest.fixture(scope="module")
def gate_specs(kernels_module: Any) -> list[Spec]:
    name = "gpu_gate_cpu_test__corpus_cuda_gates"
    sys.path.insert(0, str(CORPUS))
    try:
        spec_obj = importlib.util.spec_from_file_location(name, CORPUS / "gates.py")
        assert spec_obj is not None and spec_obj.loader is not None
        module = importlib.util.module_from_spec(spec_obj)
        spec_obj.loader.exec_module(module)
    finally:
        sys.path.remove(str(CORPUS))
    return specs_in_module(name)


def test_gate_names(gate_specs: list[Spec]) -> None:
    names = [s.name for s in gate_specs]
    assert len(set(names)) == len(names) == 22 and all(n.startswith("cu_") for n in names), names
    cuda_only = {s.name for s in gate_specs if "cpu" not in s.devices}
    assert cuda_only == {"cu_gelu_side_stream", "cu_gelu_side_stream_cupy", "cu_gelu_cupy_current_stream",
                         "cu_gelu_side_stream_ordered"}


def _call(spec: Spec, tensors: dict[str, Any], seed: int) -> None:
    inputs = dict(tensors)
    for g in spec.grads:
        inputs[g] = inputs[g].detach().requires_grad_(True)
    out = spec.fn(**inputs)
    if spec.grads:
        gen = torch.Generator().manual_seed(seed)
        upstream = torch.randn(out.shape, generator=gen, dtype=torch.float64).to(out.dtype)
        torch.autograd.grad([out], [inputs[g] for g in spec.grads], [upstream])


def test_every_gate_launches_kernels_that_exist(nvrtc_ok: None, gate_specs: list[Spec],
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    recorder = Recorder()
    monkeypatch.setattr(gg.cuda, "load", recorder.load)
    for spec in gate_specs:
        if "cpu" not in spec.devices:
            continue  # they make CUDA streams: the GPU tests run them
        before = len(recorder.launched)
        opts = ScheduleOptions(cases=12, seed=3, dtypes=None, max_case_bytes=1 << 20)
        cases = schedule(spec, opts)
        for case in cases:
            _call(spec, materialize(spec, case, "cpu").tensors, case.seed)
        assert len(recorder.launched) > before, f"{spec.name} launched no kernel"
        dtypes = {c.inputs[n].dtype for c in cases for n in spec.float_inputs()}
        assert dtypes == set(spec.dtype_choices()), (spec.name, dtypes)
    assert set(recorder.launched) <= {k for file in CORPUS.glob("*.cu") for k in entries(file.name, False)}


def test_gates_import_without_a_gpu_and_launch_nothing() -> None:
    code = (
        "import sys, torch\n"
        f"sys.path.insert(0, {str(CORPUS)!r})\n"
        "import gates\n"
        "from gpu_gate.spec import specs_in_module\n"
        "print(torch.cuda.is_initialized(), 'cupy' in sys.modules, len(specs_in_module('gates')))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env={
        **os.environ, "CUDA_VISIBLE_DEVICES": ""}, check=False)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["False", "False", "22"]


# --- nvcc, through gpu-gate's own compile check ----------------------------------------------
@pytest.mark.slow
@pytest.mark.skipif(nvcc.find_nvcc() is None, reason="nvcc is not installed")
def test_the_compile_check_builds_every_kernel_for_sm90_without_spills(kernels_module: Any, tmp_path: Path) -> None:
    files = sorted(kernels_module.KERNELS)
    job = Job(id="compile:corpus_cuda", check="compile", level="required", kernels=tuple(files),
              options={"archs": ["sm_90"]})
    out = compile_check.run(job, Context(repo_root=CORPUS, device="cpu", workdir=tmp_path))
    assert out.status is Status.PASSED, [f.message for f in out.findings]
    rows = out.extra.resources
    assert sorted(r["kernel"] for r in rows) == sorted(k for f in files for k in kernels_module.KERNELS[f])
    assert all(r["arch"] == "sm_90" and not r["spill_store"] and not r["spill_load"] for r in rows), rows
