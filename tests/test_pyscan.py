"""Triton kernels, imports and #include lines, read from source without running it."""
from __future__ import annotations

import textwrap

import pytest

from gpu_gate import cudascan, pyscan
from gpu_gate.pyscan import ModuleIndex, ParseError


def kernels(src: str) -> list[tuple[str, tuple[str, ...]]]:
    return [(k.name, k.decorators) for k in pyscan.find_triton_kernels(textwrap.dedent(src), "k.py")]


def test_plain_triton_jit() -> None:
    assert kernels("""
        import triton
        @triton.jit
        def add(x, y): pass
        def helper(): pass
    """) == [("add", ("triton.jit",))]


def test_module_alias_and_arguments() -> None:
    assert kernels("""
        import triton as tt
        @tt.jit(do_not_specialize=["n"])
        def k(n): pass
    """) == [("k", ("triton.jit",))]


def test_stacked_autotune_heuristics_jit() -> None:
    assert kernels("""
        import triton
        @triton.autotune(configs=[triton.Config({"B": 64})], key=["n"])
        @triton.heuristics({"EVEN": lambda a: a["n"] % 64 == 0})
        @triton.jit
        def k(n): pass
    """) == [("k", ("triton.autotune", "triton.heuristics", "triton.jit"))]


@pytest.mark.parametrize("imp, deco", [
    ("from triton import jit as J", "J"),
    ("from triton import jit", "jit"),
    ("from triton.runtime import jit", "jit"),
    ("from triton.runtime.jit import jit", "jit"),
    ("import triton.runtime.jit", "triton.runtime.jit.jit"),
    ("import triton.runtime as rt", "rt.jit"),
    ("from triton import autotune as at", "at(configs=[], key=[])"),
    ("from triton.experimental import gluon", "gluon.jit"),
])
def test_every_import_form(imp: str, deco: str) -> None:
    assert [k for k, _ in kernels(f"{imp}\n@{deco}\ndef kern(x): pass\n")] == ["kern"]


def test_line_is_the_first_decorator() -> None:
    [k] = pyscan.find_triton_kernels("import triton\n\n@triton.autotune([], [])\n@triton.jit\ndef k(): pass\n", "k.py")
    assert k.line == 3


def test_nested_and_method_kernels_are_found() -> None:
    assert [k for k, _ in kernels("""
        import triton
        def factory():
            @triton.jit
            def inner(x): pass
            return inner
    """)] == ["inner"]


def test_numba_jit_is_not_triton() -> None:
    assert kernels("""
        import triton
        from numba import jit
        @jit(nopython=True)
        def f(x): pass
    """) == []


def test_jit_without_any_import_is_not_triton() -> None:
    assert kernels("@jit\ndef f(): pass\n") == []


def test_triton_in_strings_and_comments_is_not_a_kernel() -> None:
    assert kernels('''
        # @triton.jit
        DOC = """
        @triton.jit
        def fake(): pass
        """
        def real(): return "triton.jit"
    ''') == []


def test_tl_is_not_a_decorator() -> None:
    assert kernels("import triton.language as tl\n@tl.constexpr\ndef f(): pass\n") == []


def test_syntax_error_names_file_and_line() -> None:
    with pytest.raises(ParseError) as err:
        pyscan.find_triton_kernels("import triton\n\n@triton.jit\ndef k(:\n    pass\n", "mylib/k.py")
    assert err.value.file == "mylib/k.py" and err.value.line == 4
    assert str(err.value) == "mylib/k.py:4: cannot parse Python: invalid syntax"


def test_null_bytes_are_a_parse_error_not_a_crash() -> None:
    with pytest.raises(ParseError, match=r"^bad\.py:1: cannot parse Python: "):
        pyscan.find_triton_kernels(b"x = 1\0\n", "bad.py")


def test_bytes_honour_the_coding_line() -> None:
    src = "# -*- coding: latin-1 -*-\nimport triton\nS = 'é'\n@triton.jit\ndef k(): pass\n".encode("latin-1")
    assert [k.name for k in pyscan.find_triton_kernels(src, "k.py")] == ["k"]


# --- imports ---------------------------------------------------------------------------------

FILES = [
    "mylib/__init__.py", "mylib/ops.py", "mylib/kernels/__init__.py", "mylib/kernels/rms.py",
    "mylib/kernels/common.py", "src/otherpkg/__init__.py", "src/otherpkg/util.py", "gate/rms_gate.py",
    "tools.py",
]


def imports(src: str, path: str) -> set[str]:
    return pyscan.module_imports(textwrap.dedent(src), path, ModuleIndex(FILES))


def test_absolute_imports_include_package_inits() -> None:
    assert imports("import mylib.kernels.rms\n", "gate/rms_gate.py") == {
        "mylib/__init__.py", "mylib/kernels/__init__.py", "mylib/kernels/rms.py"}


def test_from_import_of_a_submodule() -> None:
    assert imports("from mylib.kernels import rms\n", "gate/rms_gate.py") == {
        "mylib/__init__.py", "mylib/kernels/__init__.py", "mylib/kernels/rms.py"}


def test_relative_imports() -> None:
    assert imports("from . import common\nfrom ..ops import x\n", "mylib/kernels/rms.py") == {
        "mylib/__init__.py", "mylib/kernels/__init__.py", "mylib/kernels/common.py", "mylib/ops.py"}


def test_src_layout() -> None:
    assert imports("from otherpkg.util import f\n", "gate/rms_gate.py") == {
        "src/otherpkg/__init__.py", "src/otherpkg/util.py"}


def test_third_party_and_missing_modules_are_ignored() -> None:
    assert imports("import torch\nimport numpy as np\nfrom mylib import nothere\n", "x.py") == {"mylib/__init__.py"}


def test_import_module_with_a_literal_name() -> None:
    assert imports("import importlib\nm = importlib.import_module('tools')\n", "x.py") == {"tools.py"}


def test_index_roots_include_src() -> None:
    assert ModuleIndex(FILES).roots == ["", "src"]


# --- #include ----------------------------------------------------------------------------------

def test_includes_quoted_and_angled() -> None:
    src = '#include "a.cuh"\n  #  include <cuda/b.cuh>\n#include<vector>\n'
    assert cudascan.includes(src) == ["a.cuh", "cuda/b.cuh", "vector"]


def test_includes_in_comments_are_skipped() -> None:
    src = '// #include "no1.cuh"\n/* \n#include "no2.cuh"\n*/\n#include "yes.cuh" // trailing\n'
    assert cudascan.includes(src) == ["yes.cuh"]


def test_include_in_a_string_is_not_an_include() -> None:
    assert cudascan.includes('const char* s = "#include \\"x.cuh\\"";\n') == []


def test_resolve_relative_then_include_dirs() -> None:
    files = frozenset({"csrc/k/a.cuh", "include/common.cuh", "csrc/k/k.cu"})
    assert cudascan.resolve_include("a.cuh", "csrc/k/k.cu", ["include"], files) == "csrc/k/a.cuh"
    assert cudascan.resolve_include("common.cuh", "csrc/k/k.cu", ["include"], files) == "include/common.cuh"
    assert cudascan.resolve_include("../k/a.cuh", "csrc/k/k.cu", [], files) == "csrc/k/a.cuh"
    assert cudascan.resolve_include("cuda_runtime.h", "csrc/k/k.cu", ["include"], files) is None


def test_a_module_is_parsed_once_per_content_and_an_edit_is_parsed_again() -> None:
    """A run reads the same modules several times (the change, the specs at the head, the cache's
    keys): the same bytes under the same name give the same tree, read once; an edited file, or
    the same bytes under another name (relative imports differ), is read afresh."""
    src = b"from . import ops\nimport importlib\nm = importlib.import_module('pkg.extra')\nK = 'k.cu'\n"
    a = pyscan.parse(src, "pkg/mod.py")
    assert pyscan.parse(src, "pkg/mod.py") is a
    assert pyscan.parse(src, "other/mod.py") is not a
    edited = pyscan.parse(src.replace(b"ops", b"kernels"), "pkg/mod.py")
    assert edited is not a
    assert pyscan.imported_names(a, "pkg/mod.py") == {"pkg", "pkg.ops", "importlib", "pkg.extra"}
    assert pyscan.imported_names(edited, "pkg/mod.py") == {"pkg", "pkg.kernels", "importlib", "pkg.extra"}
    assert pyscan.imported_names(a, "lib/pkg/mod.py") == {"lib.pkg", "lib.pkg.ops", "importlib", "pkg.extra"}
    assert pyscan.string_literals(a) == {"pkg.extra", "k.cu"}
    # str and bytes of the same text are both fine, and the results are the caller's to change
    names = pyscan.imported_names(pyscan.parse(src.decode(), "pkg/mod.py"), "pkg/mod.py")
    names.add("x")
    assert "x" not in pyscan.imported_names(a, "pkg/mod.py")


# A namespace package at the top (no __init__.py: PEP 420), a regular package inside it, src layout:
# Liger-Kernel's tree until late 2024.
NAMESPACE_FILES = ["src/nslib/ops/__init__.py", "src/nslib/ops/jsd.py", "src/nslib/ops/fused_jsd.py",
                   "src/nslib/ops/utils.py", "src/nslib/transformers/__init__.py", "gate/jsd_gate.py"]


def test_a_namespace_package_at_the_top_resolves() -> None:
    index = ModuleIndex(NAMESPACE_FILES)
    assert pyscan.module_imports("from nslib.ops.fused_jsd import F\n", "gate/jsd_gate.py", index) == {
        "src/nslib/ops/__init__.py", "src/nslib/ops/fused_jsd.py"}
    assert pyscan.module_imports("from nslib.ops.jsd import k\nfrom .utils import m\n", "src/nslib/ops/fused_jsd.py",
                                 index) == {"src/nslib/ops/__init__.py", "src/nslib/ops/jsd.py", "src/nslib/ops/utils.py"}


def test_extra_roots_find_only_what_exists() -> None:
    """``src/nslib`` is a root candidate too; a name that lies under none of the roots still resolves to
    nothing, and a regular package's own parent stays a root as before."""
    index = ModuleIndex(NAMESPACE_FILES)
    assert index.roots == ["", "src", "src/nslib"]
    assert pyscan.module_imports("import nslib.missing\nimport torch\n", "gate/jsd_gate.py", index) == set()
    assert ModuleIndex(FILES).roots == ["", "src"]
