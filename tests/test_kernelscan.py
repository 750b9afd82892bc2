"""Kernel languages read from the syntax tree: each spelling a real code base uses, and what is not a kernel."""
from __future__ import annotations

import textwrap

import pytest

from gpu_gate import kernelscan


def scan(src: str) -> kernelscan.Scan:
    return kernelscan.scan(textwrap.dedent(src), "k.py")


def found(src: str) -> list[tuple[str, int, str, str]]:
    return [(k.name, k.line, k.language, k.via) for k in scan(src).kernels]


@pytest.mark.parametrize("src, expected", [
    # cuTile: `import cuda.tile as ct`, `from cuda import tile`, `@ct.function` helpers
    ("import cuda.tile as ct\n@ct.kernel\ndef add(a, b):\n    ct.store(a, ct.bid(0), ct.load(b, ct.bid(0), (16,)))\n",
     [("add", 2, "cutile", "cuda.tile.kernel")]),
    ("from cuda import tile\n@tile.kernel(occupancy=2)\ndef add(a):\n    pass\n",
     [("add", 2, "cutile", "cuda.tile.kernel")]),
    ("import cuda.tile as ct\n@ct.function\ndef helper(x):\n    return x\n",
     [("helper", 2, "cutile", "cuda.tile.function")]),
    # CuTe DSL: kernels and the @cute.jit host functions that launch them, under every import spelling
    ("import cutlass.cute as cute\n@cute.kernel\ndef k():\n    pass\n@cute.jit\ndef host():\n    k().launch(grid=[1, 1, 1])\n",
     [("k", 2, "cute", "cutlass.cute.kernel"), ("host", 5, "cute", "cutlass.cute.jit")]),
    ("from cutlass import cute\n@cute.kernel\ndef k():\n    pass\n", [("k", 2, "cute", "cutlass.cute.kernel")]),
    ("import cutlass\n@cutlass.cute.jit\ndef host():\n    pass\n", [("host", 2, "cute", "cutlass.cute.jit")]),
    ("from cutlass.cute import kernel as device_kernel\n@device_kernel\ndef k():\n    pass\n",
     [("k", 2, "cute", "cutlass.cute.kernel")]),
    # a device-side helper op, as flash-attention's and Liger-Kernel's CuTe DSL code writes them
    ("from cutlass import Float32\nfrom cutlass.cutlass_dsl import dsl_user_op\n@dsl_user_op\n"
     "def fmax(a, b, *, loc=None, ip=None) -> Float32:\n    return a\n",
     [("fmax", 3, "cute", "cutlass.cutlass_dsl.dsl_user_op")]),
    # TileLang: the jit factory and the prim_func it returns
    ("import tilelang\nimport tilelang.language as T\n@tilelang.jit(out_idx=[-1])\ndef matmul(M, N):\n"
     "    @T.prim_func\n    def main(A: T.Tensor((M, N), 'float16')):\n        pass\n    return main\n",
     [("matmul", 3, "tilelang", "tilelang.jit"), ("main", 5, "tilelang", "tilelang.language.prim_func")]),
    ("import tilelang as tl\n@tl.jit\ndef f():\n    pass\n", [("f", 2, "tilelang", "tilelang.jit")]),
    # Numba CUDA: kernels, device functions, a decorator applied by hand, vectorize with target="cuda"
    ("from numba import cuda\n@cuda.jit\ndef k(x):\n    x[cuda.grid(1)] = 0\n@cuda.jit(device=True)\ndef d(a):\n    return a\n",
     [("k", 2, "numba-cuda", "numba.cuda.jit"), ("d", 5, "numba-cuda", "numba.cuda.jit")]),
    ("import numba.cuda\ndef f(x):\n    pass\nk = numba.cuda.jit('void(float32[:])')(f)\n",
     [("f", 4, "numba-cuda", "numba.cuda.jit")]),
    ("from numba import vectorize\n@vectorize(['float32(float32)'], target='cuda')\ndef f(x):\n    return x\n",
     [("f", 2, "numba-cuda", "numba.vectorize")]),
    ("import numba\n@numba.jit(target='cuda')\ndef f(x):\n    pass\n", [("f", 2, "numba-cuda", "numba.jit")]),
    # CUDA C++ given as a string
    ("from torch.utils.cpp_extension import load_inline\n"
     "ext = load_inline('scale_ext', cpp_sources=[DECL], cuda_sources=[SRC], functions=['scale'])\n",
     [("scale_ext", 2, "inline-cuda", "torch.utils.cpp_extension.load_inline")]),
    ("import torch.utils.cpp_extension as cpp\next = cpp.load_inline(name=NAME, cpp_sources='', cuda_sources=SRC)\n",
     [("ext", 2, "inline-cuda", "torch.utils.cpp_extension.load_inline")]),
    ("import cupy as cp\n_add = cp.RawKernel(r'extern \"C\" __global__ void add_k() {}', 'add_k')\n",
     [("add_k", 2, "inline-cuda", "cupy.RawKernel")]),
    ("import cupy\nmod = cupy.RawModule(code=SRC, options=('-lineinfo',))\n",
     [("mod", 2, "inline-cuda", "cupy.RawModule")]),
    ("from cupy import ElementwiseKernel\nsq = ElementwiseKernel('float32 x', 'float32 y', 'y = x * x', 'square')\n",
     [("square", 2, "inline-cuda", "cupy.ElementwiseKernel")]),
    ("import cupy as cp\nl2 = cp.ReductionKernel('T x', 'T y', 'x * x', 'a + b', 'y = sqrt(a)', '0', 'l2norm')\n",
     [("l2norm", 2, "inline-cuda", "cupy.ReductionKernel")]),
    ("import torch\ngelu = torch.cuda.jiterator._create_jit_fn('template <typename T> T gelu(T x) { return x; }')\n",
     [("gelu", 2, "inline-cuda", "torch.cuda.jiterator._create_jit_fn")]),
    # CUDA C++ kept in a string of its own, and a templated fragment of one
    ("SRC = r\"\"\"\ntemplate <int B>\n__global__ void __launch_bounds__(256) k(float* x) {}\n\"\"\"\n",
     [("k", 3, "inline-cuda", "CUDA source in a string")]),
    ("def src(t):\n    return f\"__device__ {t} twice({t} v) {{ return 2 * v; }}\"\n",
     [("<cuda source>", 2, "inline-cuda", "CUDA source in a string")]),
    ("COUNTER = '__device__ unsigned int counter;'\n", [("<cuda source>", 1, "inline-cuda", "CUDA source in a string")]),
    # More Python GPU languages
    ("from cupyx import jit\n@jit.rawkernel()\ndef k(x):\n    pass\n", [("k", 2, "cupy-jit", "cupyx.jit.rawkernel")]),
    ("import warp as wp\n@wp.kernel\ndef k(a: wp.array(dtype=float)):\n    pass\n", [("k", 2, "warp", "warp.kernel")]),
    ("import helion\n@helion.kernel()\ndef k(x):\n    return x\n", [("k", 2, "helion", "helion.kernel")]),
    # Triton still, with the decorator applied as a call
    ("import triton\ndef body(x):\n    pass\nk = triton.jit(body)\n", [("body", 4, "triton", "triton.jit")]),
])
def test_kernels_in_every_language(src: str, expected: list[tuple[str, int, str, str]]) -> None:
    s = scan(src)
    assert found(src) == expected
    assert not s.unrecognised
    assert s.language == expected[0][2]


@pytest.mark.parametrize("src", [
    "from numba import jit, njit\n@jit(nopython=True)\ndef f(x):\n    return x\n@njit\ndef g(x):\n    return x\n",
    "import numba\n@numba.vectorize(['float32(float32)'])\ndef f(x):\n    return x\n",  # CPU ufunc
    "from torch.utils.cpp_extension import load_inline\next = load_inline('cpu_ext', cpp_sources=[SRC])\n",
    "from torch.utils.cpp_extension import load_inline\next = load_inline('e', [SRC], cuda_sources=[])\n",
    "import cupy as cp\ny = cp.asarray([1.0]) * 2\n",  # CuPy as an array library
    "import cupy as cp\nimport cupyx.scipy.ndimage\n",
    # CUDA in documentation, or only in a CUDA comment: no code
    '"""Compiles ``__global__ void add(float* x)`` with NVRTC."""\ndef f():\n    """A __device__ helper."""\n',
    "NOTE = '// __global__ kernels live in csrc/'\n",
    "QUALIFIERS = {'void', '__device__', '__host__'}\nMSG = 'Uninitialized __global__ memory read of size 4 bytes'\n",
    # the names only in text
    "# @cute.kernel and @ct.kernel live elsewhere\nDOC = '@cute.kernel def k(): ...'\nS = 'cupy.RawKernel(code, name)'\n",
    # host-side helpers of the GPU modules: a wrapper, not GPU code
    "import triton\nfrom .k import kern\ndef f(x, n):\n    kern[(triton.cdiv(n, 128),)](x, BLOCK=triton.next_power_of_2(n))\n",
    "import triton.language as tl\nDTYPES = {'float32': tl.float32, 'bfloat16': tl.bfloat16}\n",
    "import cuda.tile as ct\nfrom .k import add\ndef f(a, s):\n    ct.launch(s, (ct.cdiv(a.shape[0], 16), 1, 1), add, (a,))\n",
    "from numba import cuda\ndef f(x):\n    d = cuda.to_device(x)\n    cuda.synchronize()\n    return d\n",
    "import cutlass.cute as cute\nfrom cutlass.cute.runtime import from_dlpack\nfrom .k import host\n"
    "def f(x):\n    return cute.compile(host, from_dlpack(x))\n",
    "import triton\nimport cutlass.cute as cute\n",  # imported, never used
    # dtype maps and types in annotations (Liger-Kernel's and flash-attention's CuTe DSL glue)
    "import torch\nfrom cutlass import BFloat16, Float32\nMAP = {torch.bfloat16: BFloat16, torch.float32: Float32}\n",
    "import cutlass.cute as cute\nfrom typing import NamedTuple\nclass Blocks(NamedTuple):\n    mask: cute.Tensor\n"
    "def f(t: cute.Tensor) -> cute.Tensor:\n    return t\n",
])
def test_not_kernels_and_not_gpu_code(src: str) -> None:
    s = scan(src)
    assert s.kernels == () and s.gpu_uses == () and not s.unrecognised


@pytest.mark.parametrize("src, use", [
    # a kernel decorator behind a local alias: a hidden kernel, not a wrapper
    ("import cutlass.cute as cute\nK = cute.kernel\n@K\ndef k():\n    pass\n", "cutlass.cute.kernel"),
    ("import triton\nimport triton.language as tl\njit = triton.jit\n@jit\ndef k(x):\n    tl.load(x)\n", "triton.jit"),
    # cuTile helpers without a decorator: compiled as tile code when a kernel calls them
    ("import cuda.tile as ct\ndef helper(t):\n    return ct.exp(t) * 2\n", "cuda.tile.exp"),
    ("from triton.language import *\n", "triton.language.*"),
    ("import importlib\ntl = importlib.import_module('tilelang.language')\n", "tilelang.language"),
    ("from torch.utils.cpp_extension import load_inline\next = load_inline(**OPTIONS)\n",
     "torch.utils.cpp_extension.load_inline"),
    ("import cupy\nmake = cupy.RawKernel\n", "cupy.RawKernel"),
    ("import cutlass\nplan = cutlass.op.Gemm(element=cutlass.DataType.f16)\n", "cutlass.op.Gemm"),
    ("import numba.cuda\nbid = numba.cuda.blockIdx\n", "numba.cuda.blockIdx"),
])
def test_gpu_code_without_a_recognised_kernel_is_unrecognised(src: str, use: str) -> None:
    s = scan(src)
    assert s.kernels == ()
    assert s.unrecognised
    assert use in [u.name for u in s.gpu_uses]


def test_a_file_with_two_languages_names_both() -> None:
    s = scan("import triton\nimport cuda.tile as ct\n@triton.jit\ndef a():\n    pass\n@ct.kernel\ndef b():\n    pass\n")
    assert s.language == "cutile+triton"
    assert [k.name for k in s.kernels] == ["a", "b"]


def test_a_syntax_error_is_a_parse_error() -> None:
    with pytest.raises(kernelscan.ParseError, match=r"^mylib/k.py:2: cannot parse Python"):
        kernelscan.scan("import cuda.tile as ct\ndef k(:\n", "mylib/k.py")


@pytest.mark.parametrize("src, modules", [
    ("import cutlass.cute as cute\nK = cute.kernel\n", ["cutlass.cute"]),
    ("from triton.language import *\n", ["triton.language"]),
    ("import cuda.tile as ct\nimport numba.cuda\ndef f(t):\n    return ct.exp(t), numba.cuda.threadIdx\n",
     ["cuda.tile", "numba.cuda"]),
    ("import cupy\nmake = cupy.RawKernel\n", ["cupy"]),
])
def test_messages_name_the_gpu_module(src: str, modules: list[str]) -> None:
    assert scan(src).gpu_modules == modules


def test_a_kernel_with_stacked_decorators_is_one_kernel_at_its_first_line() -> None:
    """``@triton.autotune`` over ``@triton.heuristics`` over ``@triton.jit`` is one kernel, at the
    topmost decorator (where Python says the function starts): the report listed it once per
    decorator."""
    src = textwrap.dedent('''
        import triton
        import triton.language as tl

        @triton.autotune(configs=[triton.Config({"BLOCK": 64})], key=["n"])
        @triton.heuristics({"EVEN": lambda args: args["n"] % 64 == 0})
        @triton.jit
        def _k(x_ptr, n, BLOCK: tl.constexpr, EVEN: tl.constexpr):
            pass
        ''')
    kernels = kernelscan.scan(src, "k.py").kernels
    assert [(k.name, k.line) for k in kernels] == [("_k", 5)]
