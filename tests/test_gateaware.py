"""The gate-aware rule on its own: what it sees in Python and CUDA sources, and what it leaves to the base."""
from __future__ import annotations

from gpu_gate import gateaware
from gpu_gate.findings import Finding, Severity


def _whats(source: str, path: str = "k.py") -> list[tuple[int, str]]:
    return [(r.line, r.what) for r in gateaware.reads_of(path, source)]


def test_each_read_of_the_process_is_seen_with_its_line() -> None:
    src = ("import os, sys\n"
           "from os import getpid as gp\n"
           "def k(x):\n"
           "    if any(m.startswith('gpu_gate') for m in sys.modules):\n"
           "        return x\n"
           "    if sys.argv[1:] or gp() == 2:\n"
           "        return x\n"
           "    if open('/proc/1/cmdline').read():\n"
           "        return x\n"
           "    return os.environ.get('K')\n")
    found = _whats(src)
    assert (4, "reads sys.modules") in found and (4, "names gpu-gate") in found
    assert (6, "reads sys.argv") in found and (6, "reads a process id") in found
    assert (8, "reads /proc") in found
    assert (10, "reads environment variables") in found


def test_an_import_of_the_gate_and_the_call_stack_are_reads() -> None:
    assert _whats("import gpu_gate\n") == [(1, "names gpu-gate")]
    assert _whats("import inspect\ndef k():\n    return inspect.stack()\n") == [(3, "reads the call stack")]


def test_plain_kernel_code_and_a_docstring_naming_the_gate_are_not() -> None:
    assert _whats('"""Checked by gpu-gate."""\nimport torch\ndef k(x):\n    return torch.relu(x) * 2\n') == []


def test_cuda_sources_are_read_by_text_without_comments() -> None:
    src = '// getenv("X") in a comment\n__global__ void k() {}\nint f() { return getenv("K") != 0; }\n'
    assert _whats(src, "k.cu") == [(3, "reads environment variables")]


def _findings(head: str, base: str | None) -> list[Finding]:
    files = {"head": head.encode(), "base": base.encode() if base is not None else None}
    return gateaware.findings([("k.py", "k.py" if base is not None else None)],
                              lambda p: files["head"], lambda p: files["base"])


def test_a_new_read_blocks_and_the_same_read_at_base_is_debt() -> None:
    base = "import os\nSCALE = float(os.environ.get('K_SCALE', '1'))\n"
    same = _findings(base + "def k(x):\n    return x * SCALE\n", base)
    assert [(f.severity, f.details["change"]) for f in same] == [(Severity.WARNING, "pre-existing")]
    new = _findings(base + "def k(x):\n    return x if os.getpid() == 2 else -x\n", base)
    assert [(f.severity, f.line) for f in new if f.details["change"] == "new"] == [(Severity.ERROR, 4)]
    assert "k.py:4: kernel or wrapper code that reads a process id" in new[-1].message


def test_importing_the_main_program_is_a_read() -> None:
    """The script a process runs says what runs the kernel (a test harness's or a user's): kernel code has no
    business reading it; an ordinary module import is not a read."""
    from gpu_gate.gateaware import python_reads

    assert [r.what for r in python_reads("import __main__\npath = __main__.__file__\n")] == ["reads the main program"]
    assert python_reads("import math\nimport torch\n") == []
