"""Every kernel language is recognised in a real change, or refused loudly; so is a moved submodule.

Each case has a clean twin that must stay quiet. The repositories are real (git), and the last tests
run the ``gpu-gate`` command line on them as a user would.
"""
from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

from gpu_gate import changes
from gpu_gate.findings import Finding, Severity
from gpu_gate.record import ChangedKernel, RunRecord
from gpu_gate.verdict import Rules, decide
from conftest_git import GitRepo


def policy(include: tuple[str, ...] = ("csrc/**/*.cu", "csrc/**/*.cuh", "mylib/**/*.py"),
           exclude: tuple[str, ...] = ("third_party/**",)) -> SimpleNamespace:
    return SimpleNamespace(kernels=SimpleNamespace(include=include, exclude=exclude), specs=("gate/**/*_gate.py",),
                           cuda=SimpleNamespace(include_dirs=()))


def detect(repo: GitRepo, **kw: tuple[str, ...]) -> changes.ChangeSet:
    return changes.detect(repo.path, "main", "HEAD", policy(**kw))


def kinds(cs: changes.ChangeSet) -> list[tuple[str, str | None]]:
    return [(f.kind, f.file) for f in cs.parse_errors]


# A cuTile RMSNorm as a real library writes it: the kernel, and its host wrapper in the same file.
CUTILE_RMSNORM = '''\
import cuda.tile as ct
import torch

ConstInt = ct.Constant[int]


@ct.kernel
def rms_norm_kernel(x, w, out, eps: float, N: ConstInt, TILE: ConstInt):
    row = ct.bid(0)
    xt = ct.load(x, index=(row, 0), shape=(1, TILE)).astype(ct.float32)
    wt = ct.load(w, index=(0,), shape=(TILE,)).astype(ct.float32)
    var = ct.sum(xt * xt, axis=1, keepdims=True) / N
    y = xt * ct.rsqrt(var + eps) * wt
    ct.store(out, index=(row, 0), tile=y.astype(out.dtype))


def rms_norm(x: torch.Tensor, w: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
    out = torch.empty_like(x)
    n = x.shape[-1]
    tile = 1 << (n - 1).bit_length()
    ct.launch(torch.cuda.current_stream(), (x.shape[0], 1, 1), rms_norm_kernel, (x, w, out, eps, n, tile))
    return out
'''

# A CuTe DSL elementwise kernel and the @cute.jit function that launches it.
CUTE_SCALE = '''\
import cutlass
import cutlass.cute as cute
from cutlass.cute.runtime import from_dlpack


@cute.kernel
def scale_kernel(gX: cute.Tensor, gY: cute.Tensor, alpha: cutlass.Float32):
    tidx, _, _ = cute.arch.thread_idx()
    bidx, _, _ = cute.arch.block_idx()
    i = bidx * 128 + tidx
    if i < cute.size(gX):
        gY[i] = gX[i] * alpha


@cute.jit
def scale(mX: cute.Tensor, mY: cute.Tensor, alpha: cutlass.Float32):
    n = cute.size(mX)
    scale_kernel(mX, mY, alpha).launch(grid=[(n + 127) // 128, 1, 1], block=[128, 1, 1])


def scale_torch(x, y, alpha):
    scale(from_dlpack(x), from_dlpack(y), alpha)
'''

TILELANG_GEMM = '''\
import tilelang
import tilelang.language as T


@tilelang.jit(out_idx=[-1])
def matmul(M, N, K, block_M=128, block_N=128, block_K=32, dtype="float16"):
    @T.prim_func
    def gemm(A: T.Tensor((M, K), dtype), B: T.Tensor((K, N), dtype), C: T.Tensor((M, N), dtype)):
        with T.Kernel(T.ceildiv(N, block_N), T.ceildiv(M, block_M), threads=128) as (bx, by):
            A_s = T.alloc_shared((block_M, block_K), dtype)
            C_l = T.alloc_fragment((block_M, block_N), "float")
            T.clear(C_l)
            T.copy(C_l, C[by * block_M, bx * block_N])

    return gemm
'''

NUMBA_CUDA = '''\
import math

from numba import cuda


@cuda.jit(device=True)
def gelu(v):
    return 0.5 * v * (1.0 + math.erf(v / math.sqrt(2.0)))


@cuda.jit
def gelu_kernel(x, out):
    i = cuda.grid(1)
    if i < x.size:
        out[i] = gelu(x[i])


def run(x, out):
    gelu_kernel[(x.size + 255) // 256, 256](x, out)
'''

NUMBA_CPU = '''\
import numba
from numba import jit


@jit(nopython=True, cache=True)
def prefix_sum(a):
    for i in range(1, a.size):
        a[i] += a[i - 1]
    return a


@numba.njit
def clamp(v, lo, hi):
    return min(max(v, lo), hi)
'''

LOAD_INLINE = '''\
from torch.utils.cpp_extension import load_inline

CUDA_SRC = r"""
__global__ void scale_kernel(const float* x, float* y, float a, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = a * x[i];
}
torch::Tensor scale(torch::Tensor x, double a) { /* launch */ return x; }
"""

_ext = load_inline("scale_ext", cpp_sources="torch::Tensor scale(torch::Tensor x, double a);",
                   cuda_sources=CUDA_SRC, functions=["scale"], extra_cuda_cflags=["-lineinfo"])
'''

LOAD_INLINE_CPU = '''\
from torch.utils.cpp_extension import load_inline

_ext = load_inline("cpu_ext", cpp_sources="int twice(int x) { return 2 * x; }", functions=["twice"])
'''

RAW_KERNEL = '''\
import cupy as cp

_SRC = r"""
extern "C" __global__ void axpy(const float* x, float* y, float a, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] += a * x[i];
}
"""
_axpy = cp.RawKernel(_SRC, "axpy", options=("-lineinfo",))
_mod = cp.RawModule(code=_SRC)


def axpy(x, y, a):
    _axpy(((x.size + 255) // 256,), (256,), (x, y, cp.float32(a), cp.int32(x.size)))
'''

CUPY_ARRAYS = '''\
import cupy as cp


def softmax(x):
    e = cp.exp(x - x.max(axis=-1, keepdims=True))
    return e / e.sum(axis=-1, keepdims=True)
'''

# CuTe DSL whose kernel decorator hides behind a local name: GPU code gpu-gate cannot name.
CUTE_HIDDEN = '''\
import cutlass.cute as cute

device_kernel = cute.kernel


@device_kernel
def scale_kernel(gX: cute.Tensor, gY: cute.Tensor):
    tidx, _, _ = cute.arch.thread_idx()
    gY[tidx] = gX[tidx] * 2
'''

MENTIONS_ONLY = '''\
"""Helpers for the CuTe DSL kernels: see ``@cute.kernel`` in scale.py."""
# cute.kernel / ct.kernel / cp.RawKernel are defined elsewhere.
KERNEL_DECORATOR = "cute.kernel"


def grid_for(n, block=128):
    return ((n + block - 1) // block, 1, 1)
'''


def test_cutile_file_change_is_a_cutile_kernel_not_no_kernel_changes(repo: GitRepo) -> None:
    repo.branch("feature")
    repo.commit("cuTile RMSNorm", {"mylib/rmsnorm_cutile.py": CUTILE_RMSNORM})
    cs = detect(repo)
    assert not cs.no_kernel_changes
    assert cs.kernels == [ChangedKernel("mylib/rmsnorm_cutile.py", "cutile", "added",
                                        functions=(("rms_norm_kernel", 7),))]
    assert cs.parse_errors == []


def test_cute_dsl_file_change_names_its_kernel_and_jit_function(repo: GitRepo) -> None:
    repo.commit("base", {"mylib/scale_cute.py": CUTE_SCALE})
    repo.branch("feature")
    repo.commit("edit", {"mylib/scale_cute.py": CUTE_SCALE.replace("* alpha", "* alpha * 1.0")})
    cs = detect(repo)
    assert [(k.path, k.language, k.status, k.functions) for k in cs.kernels] == [
        ("mylib/scale_cute.py", "cute", "modified", (("scale_kernel", 6), ("scale", 15)))]
    assert cs.parse_errors == []


def test_a_plain_helper_next_to_the_kernels_is_no_kernel(repo: GitRepo) -> None:
    """Twin of the two tests above: a helper that only names the decorators in text."""
    repo.commit("base", {"mylib/scale_cute.py": CUTE_SCALE})
    repo.branch("feature")
    repo.commit("helper", {"mylib/launch_utils.py": MENTIONS_ONLY})
    cs = detect(repo)
    assert cs.kernels == [] and cs.parse_errors == [] and cs.no_kernel_changes


def test_tilelang_kernel(repo: GitRepo) -> None:
    repo.branch("feature")
    repo.commit("gemm", {"mylib/gemm_tl.py": TILELANG_GEMM})
    [k] = detect(repo).kernels
    assert (k.language, k.functions) == ("tilelang", (("matmul", 5), ("gemm", 7)))


def test_numba_cuda_kernel_and_its_cpu_twin(repo: GitRepo) -> None:
    repo.branch("feature")
    repo.commit("numba", {"mylib/gelu_numba.py": NUMBA_CUDA, "mylib/scan_cpu.py": NUMBA_CPU})
    cs = detect(repo)
    assert [(k.path, k.language, k.functions) for k in cs.kernels] == [
        ("mylib/gelu_numba.py", "numba-cuda", (("gelu", 6), ("gelu_kernel", 11)))]
    assert cs.parse_errors == []  # numba's CPU @jit is neither a kernel nor unrecognised GPU code


def test_inline_cuda_strings_and_their_cpu_twins(repo: GitRepo) -> None:
    repo.branch("feature")
    repo.commit("inline", {"mylib/ext.py": LOAD_INLINE, "mylib/ext_cpu.py": LOAD_INLINE_CPU,
                           "mylib/axpy_cupy.py": RAW_KERNEL, "mylib/softmax_cupy.py": CUPY_ARRAYS})
    cs = detect(repo)
    assert [(k.path, k.language, k.functions) for k in cs.kernels] == [
        # the __global__ function in the source string, and the two objects that compile it
        ("mylib/axpy_cupy.py", "inline-cuda", (("axpy", 4), ("axpy", 9), ("_mod", 10))),
        ("mylib/ext.py", "inline-cuda", (("scale_kernel", 4), ("scale_ext", 11))),
    ]
    assert cs.parse_errors == []


def test_cuda_source_kept_in_a_module_of_its_own_is_a_kernel(repo: GitRepo) -> None:
    """Editing the CUDA string is editing the kernel, even where the module that compiles it did not change."""
    src = 'AXPY = r"""\nextern "C" __global__ void axpy(const float* x, float* y, float a, int n) {}\n"""\n'
    repo.commit("base", {"mylib/cuda_src.py": src, "mylib/axpy_cupy.py": "import cupy as cp\nfrom .cuda_src import AXPY\n"
                         "_axpy = cp.RawKernel(AXPY, 'axpy')\n"})
    repo.branch("feature")
    repo.commit("edit the source", {"mylib/cuda_src.py": src.replace("{}", "{ y[0] = a; }")})
    assert [(k.path, k.language, k.functions) for k in detect(repo).kernels] == [
        ("mylib/cuda_src.py", "inline-cuda", (("axpy", 2),))]


def test_gpu_code_in_no_known_language_is_an_unrecognised_kernel_finding(repo: GitRepo) -> None:
    repo.branch("feature")
    repo.commit("hidden", {"mylib/scale_hidden.py": CUTE_HIDDEN})
    cs = detect(repo)
    assert not cs.no_kernel_changes
    # Still a kernel file, so that coverage applies and the specs that cover it run.
    assert [(k.path, k.language, k.status) for k in cs.kernels] == [("mylib/scale_hidden.py", "unrecognised", "added")]
    [f] = cs.parse_errors
    assert (f.check, f.kind, f.severity, f.file, f.line) == (
        "changes", "unrecognised-kernel", Severity.ERROR, "mylib/scale_hidden.py", 3)
    assert f.message.startswith("mylib/scale_hidden.py uses cutlass.cute (cutlass.cute.kernel, line 3) but "
                                "gpu-gate recognises no kernel in it, so it cannot tell which GPU code changed")
    assert "covers=" in f.message and "`unrecognised: warn`" in f.message


def test_a_deleted_kernel_keeps_its_language(repo: GitRepo) -> None:
    repo.commit("base", {"mylib/rmsnorm_cutile.py": CUTILE_RMSNORM, "mylib/scale_hidden.py": CUTE_HIDDEN})
    repo.branch("feature")
    repo.git("rm", "-q", "mylib/rmsnorm_cutile.py", "mylib/scale_hidden.py")
    repo.commit("drop")
    cs = detect(repo)
    assert [(k.path, k.language, k.status) for k in cs.kernels] == [
        ("mylib/rmsnorm_cutile.py", "cutile", "deleted"), ("mylib/scale_hidden.py", "unrecognised", "deleted")]
    assert cs.parse_errors == []  # nothing left at head to refuse


def test_outside_the_kernel_globs_nothing_is_read(repo: GitRepo) -> None:
    repo.branch("feature")
    repo.commit("scripts", {"scripts/rmsnorm_cutile.py": CUTILE_RMSNORM, "scripts/hidden.py": CUTE_HIDDEN})
    cs = detect(repo)
    assert cs.kernels == [] and cs.parse_errors == []


# --- submodules ---------------------------------------------------------------------------------

def _submodule_repo(make_repo, where: str = "csrc/cutlass", tag: str = "") -> tuple[GitRepo, GitRepo]:  # type: ignore[no-untyped-def]
    """A project that vendors a library as a submodule at ``where``; the library then moves on."""
    lib = make_repo(f"cutlass{tag}", {"include/cute/tensor.hpp": "#pragma once\n"})
    sup = make_repo(f"proj{tag}", {"csrc/k.cu": "__global__ void k() {}\n"})
    sup.git("-c", "protocol.file.allow=always", "submodule", "add", "-q", str(lib.path), where)
    sup.commit("vendor cutlass")
    lib.commit("cutlass update", {"include/cute/tensor.hpp": "#pragma once\n// v2\n"})
    return sup, lib


def _bump(sup: GitRepo, where: str) -> tuple[str, str]:
    sub = GitRepo(sup.path / where)
    old = sub.git("rev-parse", "HEAD")
    sub.git("-c", "protocol.file.allow=always", "pull", "-q", "--ff-only")
    sup.git("add", where)
    sup.commit("bump cutlass")
    return old, sub.git("rev-parse", "HEAD")


def test_submodule_bump_under_csrc_is_a_finding(make_repo) -> None:  # type: ignore[no-untyped-def]
    sup, _ = _submodule_repo(make_repo)
    sup.branch("feature")
    old, new = _bump(sup, "csrc/cutlass")
    cs = detect(sup)
    [change] = [f for f in cs.files if f.path == "csrc/cutlass"]
    assert change.gitlink == (old, new) and change.status == "modified"
    assert cs.kernels == [] and not cs.no_kernel_changes
    [f] = cs.parse_errors
    assert (f.check, f.kind, f.severity, f.file) == ("changes", "submodule-changed", Severity.ERROR, "csrc/cutlass")
    assert f.message.startswith(f"csrc/cutlass is a git submodule that moved from {old[:12]} to {new[:12]}, under "
                                "kernels.include; gpu-gate cannot see the kernels inside a submodule: gate them in "
                                "its own repository")


def test_submodule_added_or_removed_under_csrc_is_a_finding(make_repo) -> None:  # type: ignore[no-untyped-def]
    lib = make_repo("cutlass", {"include/cute/tensor.hpp": "#pragma once\n"})
    sup = make_repo("proj")
    sup.branch("feature")
    sup.git("-c", "protocol.file.allow=always", "submodule", "add", "-q", str(lib.path), "csrc/cutlass")
    sup.commit("vendor cutlass")
    [f] = detect(sup).parse_errors
    assert f.kind == "submodule-changed" and "is a git submodule that was added at" in f.message
    sup.git("checkout", "-q", "main")
    sup.branch("drop", "feature")
    sup.git("rm", "-q", "csrc/cutlass")
    sup.commit("unvendor")
    [f] = changes.detect(sup.path, "feature", "HEAD", policy()).parse_errors
    assert f.kind == "submodule-changed" and "is a git submodule that was removed (it was at" in f.message


def test_submodule_outside_the_kernel_globs_or_excluded_is_quiet(make_repo) -> None:  # type: ignore[no-untyped-def]
    """Twins: the same bump where no kernel glob reaches, and under an excluded directory."""
    for tag, where in enumerate(("docs/theme", "third_party/cutlass")):
        sup, _ = _submodule_repo(make_repo, where, tag=str(tag))
        sup.branch("feature")
        _bump(sup, where)
        cs = detect(sup)
        assert [f.path for f in cs.files] == [where]
        assert cs.parse_errors == [] and cs.no_kernel_changes, where


@pytest.mark.parametrize("pattern, directory, expected", [
    ("csrc/**/*.cu", "csrc/cutlass", True),
    ("csrc/**/*.cu", "csrc/a/b", True),
    ("csrc/*.cu", "csrc/cutlass", False),
    ("csrc/**/*.cu", "docs/theme", False),
    ("**/*.cu", "anything/at/all", True),
    ("*.cu", "vendor/lib", True),
    ("mylib/**/*.py", "mylib/vendored", True),
    ("mylib/ops/*.py", "mylib", True),
    ("csrc/", "csrc/cutlass", True),
    ("/csrc/kernels/*.cu", "csrc/kernels", True),
    ("/csrc/kernels/*.cu", "csrc/other", False),
])
def test_may_contain(pattern: str, directory: str, expected: bool) -> None:
    assert changes.may_contain(pattern, directory) is expected


# --- the verdict --------------------------------------------------------------------------------

def _record(kind: str) -> RunRecord:
    return RunRecord(plan_findings=[Finding("changes", kind, "x", Severity.ERROR, file="mylib/x.py")])


@pytest.mark.parametrize("kind, rules", [
    ("unrecognised-kernel", Rules(unrecognised="warn")),
    ("submodule-changed", Rules(submodules="warn")),
])
def test_the_policy_decides_how_much_they_weigh(kind: str, rules: Rules) -> None:
    red = decide(_record(kind), Rules())
    assert not red.passed and [i.finding.kind for i in red.blocking if i.finding] == [kind]
    assert not red.no_kernel_changes
    amber = decide(_record(kind), rules)
    assert amber.passed and [i.finding.kind for i in amber.warnings if i.finding] == [kind]


# --- end to end, as a user runs it --------------------------------------------------------------

POLICY = """\
version: 1
kernels: {include: ["csrc/**/*.cu", "mylib/**/*.py"]}
specs: ["gate/**/*_gate.py"]
not_run: warn
checks:
  compile: off
  determinism: off
  memcheck: off
  racecheck: off
  synccheck: off
  initcheck: off
  equivalence: {cases: 4, growth: false, shrink: false}
"""

# A spec whose candidate is plain torch, covering the CuTe file by name: it runs on a CPU.
COVERING_SPEC = """\
import torch
import gpu_gate as gg

@gg.spec(dims={"n": gg.Dim(1, 300)}, inputs={"x": gg.Tensor(("n",))}, reference=lambda x: x * 2,
         covers=["mylib/scale_hidden.py"])
def scale_gate(x):
    return x * 2
"""


def gate(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "gpu_gate.cli", *args], cwd=cwd, capture_output=True, text=True,
                          env=dict(os.environ), timeout=600)


def test_cli_a_new_cutile_kernel_is_not_passed_as_no_kernel_changes(make_repo) -> None:  # type: ignore[no-untyped-def]
    r = make_repo("proj", {".gpu-gate.yml": POLICY})
    r.branch("feature")
    r.commit("cuTile RMSNorm", {"mylib/__init__.py": "", "mylib/rmsnorm_cutile.py": CUTILE_RMSNORM})
    lk = gate("list-kernels", "--base", "main", cwd=r.path)
    assert lk.returncode == 0, lk.stderr
    assert "mylib/rmsnorm_cutile.py  [cutile, added]" in lk.stdout and "NOT COVERED" in lk.stdout
    p = gate("check", "--base", "main", cwd=r.path)
    assert p.returncode == 1, p.stdout + p.stderr
    assert "no kernel changes" not in p.stdout
    assert "mylib/rmsnorm_cutile.py changed but no gate spec covers it" in p.stdout


def test_cli_a_spec_that_imports_a_cutile_file_covers_it(make_repo) -> None:  # type: ignore[no-untyped-def]
    spec = ("import gpu_gate as gg\nfrom mylib.rmsnorm_cutile import rms_norm\n\n"
            "@gg.spec(dims={'r': gg.Dim(1, 8), 'h': gg.Dim(1, 64)}, inputs={'x': gg.Tensor(('r', 'h')), "
            "'w': gg.Tensor(('h',))}, reference=lambda x, w: x * w)\ndef rms_gate(x, w):\n    return rms_norm(x, w)\n")
    r = make_repo("proj", {".gpu-gate.yml": POLICY, "mylib/__init__.py": ""})
    r.branch("feature")
    r.commit("cuTile RMSNorm", {"mylib/rmsnorm_cutile.py": CUTILE_RMSNORM, "gate/rms_gate.py": spec})
    lk = gate("list-kernels", "--base", "main", cwd=r.path)
    assert lk.returncode == 0, lk.stderr
    assert "mylib/rmsnorm_cutile.py  [cutile, added]\n    covered by gate/rms_gate.py::rms_gate" in lk.stdout


def test_cli_unrecognised_gpu_code_fails_by_default_and_warns_when_the_policy_says(make_repo) -> None:  # type: ignore[no-untyped-def]
    for mode, rc in (("fail", 1), ("warn", 0)):
        r = make_repo(f"proj-{mode}", {".gpu-gate.yml": POLICY + f"unrecognised: {mode}\n"})
        r.branch("feature")
        r.commit("hidden kernel", {"mylib/scale_hidden.py": CUTE_HIDDEN, "gate/scale_gate.py": COVERING_SPEC})
        p = gate("check", "--base", "main", cwd=r.path)
        assert p.returncode == rc, (mode, p.stdout, p.stderr)
        assert "uses cutlass.cute (cutlass.cute.kernel, line 3) but gpu-gate recognises no kernel" in p.stdout
        assert "no kernel changes" not in p.stdout
        # The spec that covers the file ran either way: the code was exercised.
        record = RunRecord.read(r.path / ".gpu-gate/out/results.json")
        assert [(j.job_id, j.status.value) for j in record.results] == [
            ("equivalence:gate/scale_gate.py::scale_gate", "passed")]
        assert [k.language for k in record.kernels] == ["unrecognised"]


def test_cli_submodule_bump_under_csrc_fails_closed(make_repo) -> None:  # type: ignore[no-untyped-def]
    for mode, rc in (("fail", 1), ("warn", 0)):
        sup, _ = _submodule_repo(make_repo, tag=mode)
        sup.commit("policy", {".gpu-gate.yml": POLICY + f"submodules: {mode}\n"})
        sup.branch("feature")
        _bump(sup, "csrc/cutlass")
        p = gate("check", "--base", "main", cwd=sup.path)
        assert p.returncode == rc, (mode, p.stdout, p.stderr)
        assert "csrc/cutlass is a git submodule that moved from" in p.stdout
        assert ("FAILED" in p.stdout) is (mode == "fail")


# --- what the reports carry ---------------------------------------------------------------------

def test_kernel_names_and_lines_reach_the_record_and_the_markdown_report() -> None:
    from gpu_gate.report.markdown import render_markdown

    kernel = ChangedKernel("mylib/rmsnorm_cutile.py", "cutile", "added", functions=(("rms_norm_kernel", 7),))
    record = RunRecord.from_json(RunRecord(kernels=[kernel]).to_json())
    assert record.kernels == [kernel]
    md = render_markdown(record, decide(record, Rules()))
    assert "cutile · added" in md and "kernels: `rms_norm_kernel` (line 7)" in md
