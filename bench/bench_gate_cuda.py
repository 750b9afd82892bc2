"""The full default gate on one changed raw ``.cu`` kernel (through ``gg.cuda``), timed end to end.

    python bench/bench_gate_cuda.py [--gate-path DIR ...] [--repeats N] [--cached-rerun [--warm-rerun]]

The twin of ``bench_gate.py`` for CUDA C++: a scratch repository holds an RMSNorm kernel in
``csrc/rmsnorm.cu`` (one block per row, a shared-memory tree reduction, float32 and bfloat16) with
no Python binding, and a spec that compiles it with NVRTC and launches it through ``gg.cuda``. The
base commit has the kernel, the spec and the default policy; the head changes a comment in the
kernel. ``gpu-gate check --base --head`` then runs every check of the default policy. Prints the
same JSON as ``bench_gate.py``: wall time, per-job durations and the equivalence job's timing.
"""
from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_gate import another_change, time_gates  # noqa: E402
from bench_selection import git  # noqa: E402

POLICY = """\
version: 1
specs: ["gate/**/*_gate.py"]
"""

KERNEL = """\
#include <cuda_bf16.h>

__device__ __forceinline__ float load(const float* p, long i) { return p[i]; }
__device__ __forceinline__ float load(const __nv_bfloat16* p, long i) { return __bfloat162float(p[i]); }
__device__ __forceinline__ void store(float* p, long i, float v) { p[i] = v; }
__device__ __forceinline__ void store(__nv_bfloat16* p, long i, float v) { p[i] = __float2bfloat16(v); }

// One block of 256 threads per row: the sum of squares in float32, reduced in shared memory.
template <typename T>
__device__ void rmsnorm_row(const T* x, const T* w, T* y, int hidden, float eps) {
    __shared__ float partial[256];
    const long row = (long)blockIdx.x * hidden;
    float acc = 0.f;
    for (int j = threadIdx.x; j < hidden; j += blockDim.x) {
        float v = load(x, row + j);
        acc += v * v;
    }
    partial[threadIdx.x] = acc;
    __syncthreads();
    for (int s = blockDim.x / 2; s > 0; s >>= 1) {
        if (threadIdx.x < s) partial[threadIdx.x] += partial[threadIdx.x + s];
        __syncthreads();
    }
    const float inv = rsqrtf(partial[0] / hidden + eps);
    for (int j = threadIdx.x; j < hidden; j += blockDim.x) {
        store(y, row + j, load(x, row + j) * inv * load(w, j));
    }
}

extern "C" __global__ void rmsnorm_f32(const float* x, const float* w, float* y, int hidden, float eps) {
    rmsnorm_row(x, w, y, hidden, eps);
}

extern "C" __global__ void rmsnorm_bf16(const __nv_bfloat16* x, const __nv_bfloat16* w, __nv_bfloat16* y,
                                        int hidden, float eps) {
    rmsnorm_row(x, w, y, hidden, eps);
}
"""

SPEC = """\
import torch
import gpu_gate as gg

EPS = 1e-6


def reference(x, w):
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + EPS) * w


@gg.spec(
    dims={"rows": gg.Dim(1, 4096), "hidden": gg.Dim(1, 8192)},
    inputs={"x": gg.Tensor(("rows", "hidden"), dtypes=["float32", "bfloat16"]),
            "w": gg.Tensor(("hidden",), dtype="like:x")},
    reference=reference,
)
def rmsnorm_gate(x, w):
    name = "rmsnorm_f32" if x.dtype == torch.float32 else "rmsnorm_bf16"
    kernel = gg.cuda.load("csrc/rmsnorm.cu", name)
    x, w = x.contiguous(), w.contiguous()
    y = gg.empty_like(x)
    if x.numel():
        kernel((x.shape[0],), (256,), x, w, y, gg.cuda.int32(x.shape[1]), gg.cuda.float32(EPS))
    return y
"""


def scratch(where: Path) -> tuple[Path, str, str]:
    repo = where / "cudarepo"
    (repo / "csrc").mkdir(parents=True)
    (repo / "gate").mkdir()
    git(where, "init", "-q", "-b", "main", str(repo))
    for rel, text in {".gpu-gate.yml": POLICY, "csrc/rmsnorm.cu": KERNEL, "gate/rmsnorm_gate.py": SPEC}.items():
        (repo / rel).write_text(text)
    git(repo, "add", "-A")
    git(repo, "-c", "user.name=bench", "-c", "user.email=bench@localhost", "commit", "-q", "-m", "rmsnorm")
    base = git(repo, "rev-parse", "HEAD")
    (repo / "csrc" / "rmsnorm.cu").write_text(KERNEL + "static const int reviewed_ = 1;  // a token: a comment alone is no change\n")
    git(repo, "-c", "user.name=bench", "-c", "user.email=bench@localhost", "commit", "-q", "-am", "comment")
    return repo, base, git(repo, "rev-parse", "HEAD")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--gate-path", type=Path, action="append", help="a gpu-gate source tree to time (repeatable)")
    ap.add_argument("--repeats", type=int, default=1)
    ap.add_argument("--cached-rerun", action="store_true",
                    help="each timed gate writes a fresh result cache, and the same gate runs again on it")
    ap.add_argument("--warm-rerun", action="store_true",
                    help="with --cached-rerun: then a new head that changes the kernel again, gated with the same "
                         "cache (the results miss): warm_rerun")
    args = ap.parse_args()
    paths = args.gate_path or [Path(__file__).resolve().parents[1]]
    with tempfile.TemporaryDirectory() as tmp:
        repo, base, head = scratch(Path(tmp))
        again = "#define GPU_GATE_REVIEWED_AGAIN 1  // a token: a comment alone is no change"
        warm = (lambda: another_change(repo, head, "csrc/rmsnorm.cu", again)) if args.warm_rerun else None
        time_gates(repo, base, head, paths, Path(tmp), args.repeats, args.cached_rerun, warm)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
