"""The judge/worker split on a GPU: the attacks that need CUDA, each beside its honest twin, run as
the gate runs them (judge outside, candidate and reference in sandboxed workers).

- a side stream made current through ``torch._C._cuda_setStream``, the function every stream API of
  torch ends in, with the output finished there after the call returned: ``unordered-stream``;
- a CUDA graph captured on the first call and replayed on later ones, reading the addresses it was
  captured with: ``address-dependent`` (the same values at other addresses give another answer);
- the CPU corpus of attacks (forged results, patched comparison, lying subclass, caches) again, with
  CUDA tensors.
"""
from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from gpu_gate.executor.options import ExecOptions
from gpu_gate.executor.slots import detect_gpus
from gpu_gate.executor.scheduling import execute
from gpu_gate.findings import JobResult, Severity, Status
from gpu_gate.protocol.jobs import Job, SpecRef

pytestmark = pytest.mark.gpu

SPEC = """\
import torch
import gpu_gate as gg
from lib.kern import double

@gg.spec(dims={"rows": gg.Dim(1, 64), "n": gg.Dim(1, 4096)},
         inputs={"x": gg.Tensor(("rows", "n"), dtypes=["float32"], layouts=["contiguous"])},
         reference=lambda x: x * 2, devices=["cuda"])
def double_gate(x):
    return double(x)
"""

KERNELS = {
    "raw_set_stream": ("""\
import torch

_side = None

def double(x):
    global _side
    _side = _side or torch.cuda.Stream()
    out = torch.empty_like(x)
    caller = torch.cuda.current_stream()
    _side.wait_stream(caller)
    torch._C._cuda_setStream(stream_id=_side.stream_id, device_index=_side.device_index,
                             device_type=_side.device_type)
    torch.mul(x, 2, out=out)
    torch._C._cuda_setStream(stream_id=caller.stream_id, device_index=caller.device_index,
                             device_type=caller.device_type)
    return out  # BUG: the caller's stream never waits for the side stream
""", "unordered-stream"),
    "raw_set_stream_ordered": ("""\
import torch

_side = None

def double(x):
    global _side
    _side = _side or torch.cuda.Stream()
    out = torch.empty_like(x)
    caller = torch.cuda.current_stream()
    _side.wait_stream(caller)
    torch._C._cuda_setStream(stream_id=_side.stream_id, device_index=_side.device_index,
                             device_type=_side.device_type)
    torch.mul(x, 2, out=out)
    torch._C._cuda_setStream(stream_id=caller.stream_id, device_index=caller.device_index,
                             device_type=caller.device_type)
    caller.wait_stream(_side)
    return out
""", None),
    "stale_graph": ("""\
import torch

_graphs = {}

def double(x):
    key = (tuple(x.shape), x.dtype)
    if key not in _graphs:  # BUG: captured once per shape, replayed whatever x is now
        static_out = torch.empty_like(x)
        g = torch.cuda.CUDAGraph()
        s = torch.cuda.Stream()
        s.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(s):
            torch.mul(x, 2, out=static_out)
        torch.cuda.current_stream().wait_stream(s)
        with torch.cuda.graph(g):
            torch.mul(x, 2, out=static_out)
        _graphs[key] = (g, static_out)
    g, static_out = _graphs[key]
    g.replay()
    return static_out.clone()
""", "address-dependent"),
    "graph_per_address": ("""\
import torch

_graphs = {}

def double(x):
    key = (x.data_ptr(), tuple(x.shape), tuple(x.stride()), x.dtype)
    if key not in _graphs:  # keyed by address too: a replay reads what it was handed
        static_out = torch.empty_like(x)
        g = torch.cuda.CUDAGraph()
        s = torch.cuda.Stream()
        s.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(s):
            torch.mul(x, 2, out=static_out)
        torch.cuda.current_stream().wait_stream(s)
        with torch.cuda.graph(g):
            torch.mul(x, 2, out=static_out)
        _graphs[key] = (g, static_out)
    g, static_out = _graphs[key]
    g.replay()
    return static_out.clone()
""", None),
}


def _repo(root: Path, kern: str, spec: str = SPEC) -> Path:
    (root / "lib").mkdir(parents=True)
    (root / "lib" / "__init__.py").write_text("")
    (root / "lib" / "kern.py").write_text(textwrap.dedent(kern))
    (root / "gate").mkdir()
    (root / "gate" / "double_gate.py").write_text(spec)
    return root


def _run(root: Path, gpu: str) -> JobResult:
    job = Job(id="equivalence:gate/double_gate.py::double_gate", check="equivalence", level="required",
              kernels=(), spec=SpecRef("gate/double_gate.py", "double_gate"),
              options={"cases": 16, "growth": False, "shrink": False})
    (result,) = execute([job], ExecOptions(repo_root=root, gpus=(gpu,), timeout_s=300))
    return result


@pytest.fixture(scope="module")
def gpu() -> str:
    gpus = detect_gpus()
    if not gpus:
        pytest.skip("no GPU")
    return gpus[0]


@pytest.mark.parametrize("name", sorted(KERNELS))
def test_cuda_attacks_are_caught_and_twins_pass(tmp_path: Path, gpu: str, name: str) -> None:
    kern, kind = KERNELS[name]
    r = _run(_repo(tmp_path, kern), gpu)
    errors = [f"{f.kind}: {f.message}" for f in r.findings if f.severity is Severity.ERROR]
    if kind is None:
        assert r.status is Status.PASSED, errors
    else:
        assert r.status is Status.FAILED, errors
        assert kind in {f.kind for f in r.findings if f.severity is Severity.ERROR}, errors


def test_the_cpu_attack_corpus_is_caught_on_the_gpu(tmp_path: Path, gpu: str) -> None:
    from test_judge_adversarial import ATTACKS, CAUGHT, HEAD, HONEST

    spec = HEAD.replace('reference=lambda x: x * 2)', 'reference=lambda x: x * 2, devices=["cuda"])')
    missed = {}
    for name, kern in {**ATTACKS, "honest": HONEST}.items():
        r = _run(_repo(tmp_path / name, kern, spec), gpu)
        kinds = {f.kind for f in r.findings if f.severity is Severity.ERROR}
        if name == "honest":
            ok = r.status is Status.PASSED
        else:
            want, status = CAUGHT[name]
            ok = r.status is status and want <= kinds
        if not ok:
            missed[name] = (r.status, sorted(kinds), [f.message[:200] for f in r.findings][:3])
    assert not missed, missed
