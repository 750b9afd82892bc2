"""GPU code that arrives by a side door is GPU code: a compiled artefact (.so, .cubin, .ptx, ...)
under the kernel globs, a library loaded through ctypes or cffi, a getattr by a computed name on
a GPU module. Each is a kernel gpu-gate cannot read (``unrecognised``), never "no kernel changes".
Real git repositories through the CLI (``check`` has no job to run here: it is quick)."""
from __future__ import annotations

import json

import pytest

from conftest_git import GitRepo
from gpu_gate.kernelscan import scan
from test_cli import gate

POLICY = """\
version: 1
kernels: {include: ["csrc/**/*.cu", "mylib/**/*.py"]}
specs: ["gate/**/*_gate.py"]
checks:
  compile: off
  determinism: off
  memcheck: off
  racecheck: off
  synccheck: off
  initcheck: off
  equivalence: {cases: 4, growth: false, shrink: false}
"""
KERNEL = "__global__ void rows(const float* x, float* y, int n) { /* row sums */ }\n"
LOADER = """\
import ctypes
import os

_LIB = ctypes.CDLL(os.path.join(os.path.dirname(__file__), "librows.so"))


def row_sum(x, y, n):
    _LIB.rows(x, y, n)
"""
COMPUTED = """\
import cupy

_COMPILE = getattr(cupy, "Raw" + "Kernel")
_K = _COMPILE(open(__file__.replace(".py", ".src")).read(), "rows")


def row_sum(x, y, n):
    _K((1,), (n,), (x, y, n))
"""
SYSTEM = """\
import ctypes
import ctypes.util

_LIBC = ctypes.CDLL("libc.so.6")
_M = ctypes.CDLL(ctypes.util.find_library("m"))


def now():
    return _LIBC.time(None)
"""


def _repo(make_repo) -> GitRepo:  # type: ignore[no-untyped-def]
    r = make_repo("proj", {".gitignore": ".gpu-gate/\n", ".gpu-gate.yml": POLICY, "csrc/rows.cu": KERNEL,
                           "csrc/rows.cubin": b"\x7fELF\x02\x01\x01" + bytes(64), "mylib/__init__.py": ""})
    r.branch("feature")
    return r


def _check(r: GitRepo) -> tuple[int, str, list[dict]]:  # type: ignore[type-arg]
    p = gate("check", "--base", "main", "--cpu", cwd=r.path)
    out = r.path / ".gpu-gate" / "out" / "results.json"
    findings = json.loads(out.read_text()).get("plan_findings", []) if out.exists() else []
    return p.returncode, p.stdout + p.stderr, findings


def _unrecognised(findings: list[dict]) -> dict[str, str]:  # type: ignore[type-arg]
    return {f["file"]: f["message"] for f in findings if f["kind"] == "unrecognised-kernel"}


@pytest.mark.parametrize("path", ["csrc/rows.cubin", "csrc/bin/rows.ptx", "mylib/librows.so", "mylib/librows.so.1",
                                  "csrc/rows.fatbin", "csrc/rows.hsaco"])
def test_a_changed_binary_artefact_is_an_unrecognised_kernel(make_repo, path: str) -> None:  # type: ignore[no-untyped-def]
    r = _repo(make_repo)
    r.commit("prebuilt kernel", {path: b"\x7fELF\x02\x01\x01" + bytes(range(64))})
    code, text, findings = _check(r)
    assert "no kernel changes" not in text
    assert code == 1, text
    assert "compiled GPU artefact" in _unrecognised(findings)[path], findings


def test_an_artefact_outside_the_kernel_globs_is_not_a_kernel(make_repo) -> None:  # type: ignore[no-untyped-def]
    r = _repo(make_repo)
    r.commit("a tool's binary", {"tools/helper.so": b"\x7fELF" + bytes(16)})
    code, text, findings = _check(r)
    assert code == 0, text
    assert "no kernel changes" in text and not _unrecognised(findings)


@pytest.mark.parametrize("source", [LOADER, COMPUTED], ids=["ctypes", "computed-getattr"])
def test_gpu_code_loaded_by_a_side_door_is_unrecognised(make_repo, source: str) -> None:  # type: ignore[no-untyped-def]
    r = _repo(make_repo)
    r.commit("a new op", {"mylib/rows.py": source})
    code, text, findings = _check(r)
    assert "no kernel changes" not in text
    assert code == 1, text
    assert "gpu-gate recognises no kernel in it" in _unrecognised(findings)["mylib/rows.py"], findings


def test_a_system_library_is_not_gpu_code(make_repo) -> None:  # type: ignore[no-untyped-def]
    r = _repo(make_repo)
    r.commit("a clock", {"mylib/clock.py": SYSTEM})
    code, text, findings = _check(r)
    assert code == 0, text
    assert not _unrecognised(findings)


@pytest.mark.parametrize("src", [
    "import cffi\nffi = cffi.FFI()\nlib = ffi.dlopen('./build/librows.so')\n",
    "from cffi import FFI\nffi = FFI()\nlib = ffi.dlopen(PATH)\n",
    "import ctypes\nlib = ctypes.cdll.LoadLibrary(str(HERE / 'librows.so'))\n",
    "import torch\ntorch.ops.load_library(LIB)\n",
    "import torch\nload = getattr(torch.ops, 'load_' + 'library')\n",
    "import pycuda.driver as drv\nmod = drv.module_from_file('rows.cubin')\n",
    "from cuda.core import ObjectCode\ncode = ObjectCode.from_cubin(DATA)\n",
    "import cupy\nmod = cupy.RawModule(path='rows.cubin')\n",
    "import cupy\n\n@cupy.fuse()\ndef scale(x, a):\n    return x * a\n",
    "import cupy\nmod = cupy.cuda.function.Module()\nmod.load_file('rows.cubin')\n",
])
def test_every_side_door_is_a_gpu_use(src: str) -> None:
    assert scan(src, "m.py").unrecognised or scan(src, "m.py").kernels


@pytest.mark.parametrize("src", [
    "import ctypes\nlib = ctypes.CDLL('libcuda.so.1')\n",
    "import cffi\nffi = cffi.FFI()\nC = ffi.dlopen(None)\n",
    "import cupy as cp\ny = cp.asarray([1.0]) * 2\n",
    "import cupy as cp\ne = cp.exp(x - x.max(axis=-1, keepdims=True))\ny = e / e.sum(axis=-1)\n",
    "x = getattr(obj, 'a' + 'b')\n",
])
def test_host_code_is_not_a_gpu_use(src: str) -> None:
    assert scan(src, "m.py").gpu_uses == ()
