"""Launch one planted-bug (or clean) kernel; run under compute-sanitizer by the GPU tests.

usage: python run_case.py CASE [--pool]

Without ``--pool`` CuPy's memory pools are turned off, as the harness does under
compute-sanitizer; torch's caching is governed by PYTORCH_NO_CUDA_MEMORY_CACHING.
"""
from __future__ import annotations

import sys
from pathlib import Path

import torch

import gpu_gate.cuda as gcuda

HERE = Path(__file__).resolve().parent
N = 1000  # not a multiple of any block size
BLOCK = 256


def _kernel(file: str, name: str) -> gcuda.Kernel:
    return gcuda.load(HERE / file, name)


def cuda_tail(name: str) -> None:
    import cupy

    x = cupy.arange(N, dtype=cupy.float32)
    y = cupy.empty(N, dtype=cupy.float32)
    _kernel("tail.cu", name)(((N + BLOCK - 1) // BLOCK,), (BLOCK,), x, y, gcuda.int32(N))
    cupy.cuda.get_current_stream().synchronize()


def triton_tail(name: str) -> None:
    import triton_copy

    fn = getattr(triton_copy, name)
    x = torch.arange(N, dtype=torch.float32, device="cuda")
    y = torch.empty_like(x)
    fn[(triton_cdiv(N, 128),)](x, y, N, BLOCK=128)
    torch.cuda.synchronize()


def triton_cdiv(a: int, b: int) -> int:
    return (a + b - 1) // b


def smem(name: str) -> None:
    x = torch.randn(4 * 256, device="cuda")
    y = torch.empty_like(x)
    _kernel("smem.cu", name)((4,), (256,), x, y)
    torch.cuda.synchronize()


def barrier(name: str) -> None:
    y = torch.empty(2 * 256, device="cuda")
    _kernel("barrier.cu", name)((2,), (256,), y)
    torch.cuda.synchronize()


def uninit(initialised: bool) -> None:
    x = torch.ones(N, device="cuda") if initialised else torch.empty(N, device="cuda")
    y = torch.empty(N, device="cuda")
    _kernel("uninit.cu", "read_input")((triton_cdiv(N, BLOCK),), (BLOCK,), x, y, gcuda.int32(N))
    torch.cuda.synchronize()


def hang() -> None:
    flag = torch.zeros(1, dtype=torch.int32, device="cuda")
    _kernel("hang.cu", "spin_forever")((1,), (1,), flag)
    torch.cuda.synchronize()


def workload() -> None:
    """A spec-like run: a few cases of a CUDA and a Triton kernel, checked against torch."""
    import triton_copy

    tail_ok = _kernel("tail.cu", "tail_ok")
    smem_ok = _kernel("smem.cu", "smem_ok")
    for n in (1, 97, 1000, 4099, 65537):
        x = torch.randn(n, device="cuda")
        y = torch.empty_like(x)
        tail_ok((triton_cdiv(n, BLOCK),), (BLOCK,), x, y, gcuda.int32(n))
        z = torch.empty_like(x)
        triton_copy.copy_masked[(triton_cdiv(n, 128),)](x, z, n, BLOCK=128)
        torch.testing.assert_close(y, 2 * x)
        torch.testing.assert_close(z, 2 * x)
    x = torch.randn(16 * 256, device="cuda")
    y = torch.empty_like(x)
    smem_ok((16,), (256,), x, y)
    torch.testing.assert_close(y.view(16, 256), x.view(16, 256).roll(-1, dims=1))


CASES = {
    "cuda_tail_bug": lambda: cuda_tail("tail_oob"),
    "cuda_tail_ok": lambda: cuda_tail("tail_ok"),
    "triton_tail_bug": lambda: triton_tail("copy_nomask"),
    "triton_tail_ok": lambda: triton_tail("copy_masked"),
    "smem_race": lambda: smem("smem_race"),
    "smem_ok": lambda: smem("smem_ok"),
    "divergent_barrier": lambda: barrier("divergent_barrier"),
    "uniform_barrier": lambda: barrier("uniform_barrier"),
    "uninit_bug": lambda: uninit(False),
    "uninit_ok": lambda: uninit(True),
    "hang": hang,
    "workload": workload,
}


def main(argv: list[str]) -> int:
    case = argv[0]
    if "--pool" not in argv:
        gcuda.disable_pools()
    sys.path.insert(0, str(HERE))
    CASES[case]()
    print(f"case {case} done")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
