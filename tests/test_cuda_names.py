from __future__ import annotations

from pathlib import Path

from gpu_gate.cuda.names import (
    blank_comments_and_strings,
    cuda_kernel_names,
    kernel_names_in_file,
    triton_kernel_names,
)

DATA = Path(__file__).parent / "data" / "cuda"


def test_tricky_cuda_source_yields_exactly_the_real_kernels() -> None:
    source = (DATA / "tricky_names.cu").read_text()
    names = {k.name: k for k in cuda_kernel_names(source)}
    assert list(names) == [
        "reduce_rows",
        "plain_c",
        "in_c_block",
        "with_macro_attrs",
        "with_function_macro",
        "with_attribute",
        "in_namespace",
    ]
    lines = source.splitlines()
    for kernel in names.values():
        assert kernel.name in lines[kernel.line - 1], kernel
    assert names["reduce_rows"].template and not names["reduce_rows"].extern_c
    assert names["plain_c"].extern_c and names["in_c_block"].extern_c
    assert not names["with_attribute"].extern_c


def test_blanking_keeps_line_numbers_and_extern_c() -> None:
    source = 'a /* x\n y */ "s\\"q" // c\nextern "C" b'
    blanked = blank_comments_and_strings(source)
    assert blanked.count("\n") == source.count("\n")
    assert len(blanked) == len(source)
    assert 'extern "C"' in blanked and "q" not in blanked and "y" not in blanked


def test_triton_kernels_found_by_parsing_not_by_text() -> None:
    source = '''
import triton
import triton.language as tl
from triton import jit

DOC = "@triton.jit\\ndef fake(x): pass"

@triton.autotune(configs=[], key=["n"])
@triton.jit
def tuned(x_ptr, n, BLOCK: tl.constexpr):
    pass

@jit
def bare(x_ptr):
    pass

@triton.heuristics({"EVEN": lambda a: True})
@triton.jit(do_not_specialize=["n"])
def with_args(x_ptr, n, EVEN: tl.constexpr):
    pass

def helper(x):
    return x
'''
    assert [k.name for k in triton_kernel_names(source)] == ["tuned", "bare", "with_args"]
    assert kernel_names_in_file("k.py", "def broken(:") == []


def test_file_kind_is_chosen_by_extension() -> None:
    assert [k.name for k in kernel_names_in_file("a.cuh", "__global__ void k(int*);")] == ["k"]
    assert kernel_names_in_file("a.py", "__global__ = 1") == []
