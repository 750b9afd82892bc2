"""Only real changes count: a kernel file is modified when its token stream changed, not its comments
or layout (a comment edited in a header that many kernels include affects none of them)."""
from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from gpu_gate.tokens import same_meaning

HEADER = """\
#pragma once
// Shared helpers for the row kernels.
#define BLOCK 256
__device__ inline float twice(float x) { return 2.0f * x; }
"""


def test_comments_and_layout_do_not_change_a_cuda_source() -> None:
    edited = HEADER.replace("// Shared helpers for the row kernels.", "/* Helpers,\n   shared. */") + "\n\n"
    assert same_meaning("k.cuh", HEADER.encode(), edited.encode())
    assert same_meaning("k.cuh", HEADER.encode(), HEADER.replace("{ return", "{\n    return").encode())


def test_a_changed_token_a_string_or_a_directive_line_is_a_change() -> None:
    for edited in (HEADER.replace("2.0f", "3.0f"),
                   HEADER.replace("#define BLOCK 256", "#define BLOCK 128"),
                   # joining a directive with the next line changes what the preprocessor reads
                   HEADER.replace("#define BLOCK 256\n", "#define BLOCK 256 "),
                   HEADER + 'const char* s = "// not a comment";\n'):
        assert not same_meaning("k.cuh", HEADER.encode(), edited.encode()), edited


def test_python_comments_count_for_nothing_docstrings_and_indentation_do() -> None:
    src = 'def f(x):\n    """Twice."""\n    return 2 * x  # the row\n'
    assert same_meaning("k.py", src.encode(), src.replace("  # the row", "").encode() + b"\n# more\n")
    assert not same_meaning("k.py", src.encode(), src.replace("Twice.", "Thrice.").encode())
    assert not same_meaning("k.py", src.encode(), src.replace("2 * x", "3 * x").encode())
    assert not same_meaning("k.py", src.encode(), b"def f(x):\n    return (\n")  # does not tokenize: changed


def test_unknown_files_and_undecodable_bytes_are_changes() -> None:
    assert not same_meaning("table.json", b'{"a": 1}', b'{"a": 1 }')
    assert not same_meaning("k.cu", b"int x;", b"int x; \xff")


POLICY = """\
version: 1
kernels: {include: ["csrc/**/*.cu", "csrc/**/*.cuh"]}
specs: ["gate/**/*_gate.py"]
checks:
  equivalence: {cases: 4, growth: false, shrink: false}
"""


def _gate(repo: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "gpu_gate.cli", *args], cwd=repo, capture_output=True, text=True,
                          timeout=600)


def test_a_comment_in_a_header_included_by_twenty_kernels_makes_no_job(make_repo) -> None:  # type: ignore[no-untyped-def]
    files = {".gpu-gate.yml": POLICY, "csrc/common.cuh": HEADER}
    for i in range(20):
        files[f"csrc/k{i:02d}.cu"] = f'#include "common.cuh"\n__global__ void k{i}(float* x) {{ x[0] = twice(x[0]); }}\n'
    r = make_repo("many", files)
    r.branch("feature")
    r.commit("comment", {"csrc/common.cuh": HEADER.replace("Shared helpers", "Shared, tested helpers")})
    p = _gate(r.path, "plan", "--base", "main")
    assert p.returncode == 0, p.stdout + p.stderr
    plan = json.loads(p.stdout)
    assert plan["jobs"] == [] and not [f for f in plan["findings"] if f["kind"] == "uncovered"], plan
    assert any("comments and layout only" in n and "csrc/common.cuh" in n for n in plan["notes"]), plan["notes"]
    # the legitimate change beside it: the same header with a changed token affects all twenty
    r.commit("real", {"csrc/common.cuh": HEADER.replace("2.0f", "3.0f")})
    plan = json.loads(_gate(r.path, "plan", "--base", "main").stdout)
    assert len([f for f in plan["findings"] if f["kind"] == "uncovered"]) == 21, plan["findings"]  # the header and its 20 includers
