"""Change detection on real repositories: kernel files, Triton by AST, propagation."""
from __future__ import annotations

import time
from types import SimpleNamespace

import pytest

from gpu_gate import changes
from gpu_gate.changes import match
from gpu_gate.findings import Finding, Severity
from conftest_git import GitRepo, git_env, make_repo, repo  # noqa: F401  (fixtures)


def policy(include: tuple[str, ...] = ("csrc/**/*.cu", "csrc/**/*.cuh", "mylib/**/*.py"),
           exclude: tuple[str, ...] = ("third_party/**",), specs: tuple[str, ...] = ("gate/**/*_gate.py",),
           include_dirs: tuple[str, ...] = ()) -> SimpleNamespace:
    return SimpleNamespace(kernels=SimpleNamespace(include=include, exclude=exclude), specs=specs,
                           cuda=SimpleNamespace(include_dirs=include_dirs))


TRITON = "import triton\n\n@triton.jit\ndef k(x):\n    pass\n"


def summary(cs: changes.ChangeSet) -> dict[str, tuple[str, str, tuple[str, ...]]]:
    return {k.path: (k.language, k.status, k.via) for k in cs.kernels}


# --- globs -------------------------------------------------------------------------------------

@pytest.mark.parametrize("path, pattern, expected", [
    ("csrc/a.cu", "csrc/**/*.cu", True),
    ("csrc/x/y/a.cu", "csrc/**/*.cu", True),
    ("csrc/a.cuh", "csrc/**/*.cu", False),
    ("other/csrc/a.cu", "csrc/**/*.cu", False),
    ("csrc/x/a.cu", "csrc/*.cu", False),
    ("a.cu", "*.cu", True),
    ("deep/down/a.cu", "*.cu", True),
    ("third_party/cutlass/x.cuh", "third_party/**", True),
    ("third_party/x.cuh", "third_party/", True),
    ("vendor/third_party/x.cuh", "third_party/", True),
    ("vendor/third_party/x.cuh", "/third_party/", False),
    ("third_party/x.cuh", "third_party", True),
    ("third_partyx/x.cuh", "third_party", False),
    ("gate/rms_gate.py", "gate/**/*_gate.py", True),
    ("gate/sub/rms_gate.py", "gate/**/*_gate.py", True),
    ("gate/rms.py", "gate/**/*_gate.py", False),
    ("a/b/c.py", "a/**/c.py", True),
    ("a/c.py", "**/c.py", True),
    ("k1.cu", "k?.cu", True),
    ("k10.cu", "k?.cu", False),
    ("ka.cu", "k[ab].cu", True),
    ("kc.cu", "k[!ab].cu", True),
    ("ka.cu", "k[!ab].cu", False),
    ("x.cu", "/x.cu", True),
    ("a+b (1).cu", "a+b (1).cu", True),
])
def test_match(path: str, pattern: str, expected: bool) -> None:
    assert match(path, pattern) is expected


def test_a_list_of_globs_reads_as_gitignore_does_with_negation() -> None:
    """pathspec's gitignore semantics: a later ``!pattern`` takes back what an earlier one matched."""
    is_kernel = changes.matcher(["mylib/**/*.py", "!mylib/testing/**"], ["mylib/vendored.py"])
    assert is_kernel("mylib/ops/rms.py") and is_kernel("mylib/testing.py")
    assert not is_kernel("mylib/testing/fake_kernels.py") and not is_kernel("mylib/vendored.py")


def test_globs_are_matched_by_pathspec_not_a_hand_written_translation() -> None:
    import inspect

    source = inspect.getsource(changes)
    assert "pathspec" in source and "fullmatch" not in source and "_glob_regex" not in source


# --- detection ----------------------------------------------------------------------------------

def test_no_kernel_changes(repo: GitRepo) -> None:
    repo.branch("feature")
    repo.commit("docs", {"docs/readme.md": "x\n", "mylib/plain.py": "def f():\n    return 1\n"})
    cs = changes.detect(repo.path, "main", "HEAD", policy())
    assert cs.no_kernel_changes
    assert cs.kernels == [] and cs.parse_errors == []
    assert sorted(f.path for f in cs.files) == ["docs/readme.md", "mylib/plain.py"]


def test_cuda_and_triton_kernels_respect_globs(repo: GitRepo) -> None:
    repo.branch("feature")
    repo.commit("k", {
        "csrc/ops/add.cu": "__global__ void add() {}\n",
        "third_party/lib/x.cu": "__global__ void x() {}\n",
        "mylib/kernels/rms.py": TRITON,
        "mylib/not_a_kernel.py": "import triton\nX = 'triton.jit'\n",
        "scripts/tk.py": TRITON,  # Triton, but outside the kernel globs
    })
    cs = changes.detect(repo.path, "main", "HEAD", policy())
    assert summary(cs) == {
        "csrc/ops/add.cu": ("cuda", "added", ()),
        "mylib/kernels/rms.py": ("triton", "added", ()),
    }
    assert not cs.no_kernel_changes


def test_numba_jit_module_is_not_a_kernel(repo: GitRepo) -> None:
    repo.branch("feature")
    repo.commit("numba", {"mylib/fast.py": "from numba import jit\n\n@jit\ndef f(x):\n    return x\n"})
    assert changes.detect(repo.path, "main", "HEAD", policy()).kernels == []


def test_deleted_and_renamed_kernels(repo: GitRepo) -> None:
    body = "".join(f"// line {i}\n" for i in range(40))
    repo.commit("base", {"csrc/old.cu": body, "csrc/dead.cu": "x\n", "mylib/tk.py": TRITON})
    repo.branch("feature")
    repo.git("mv", "csrc/old.cu", "csrc/new.cu")
    repo.git("rm", "-q", "csrc/dead.cu", "mylib/tk.py")
    repo.commit("move and delete")
    cs = changes.detect(repo.path, "main", "HEAD", policy())
    assert summary(cs) == {
        "csrc/new.cu": ("cuda", "renamed", ()),
        "csrc/dead.cu": ("cuda", "deleted", ()),
        "mylib/tk.py": ("triton", "deleted", ()),
    }


def test_syntax_error_is_a_parse_error_finding(repo: GitRepo) -> None:
    repo.branch("feature")
    repo.commit("broken", {"mylib/broken.py": "import triton\n\n@triton.jit\ndef k(x:\n    pass\n"})
    cs = changes.detect(repo.path, "main", "HEAD", policy())
    assert cs.parse_errors == [Finding(
        check="changes", kind="parse-error", severity=Severity.ERROR, file="mylib/broken.py", line=4,
        message="mylib/broken.py:4: cannot parse Python: '(' was never closed")]


def test_header_change_propagates_transitively(repo: GitRepo) -> None:
    repo.commit("base", {
        "csrc/a.cuh": "#pragma once\n",
        "csrc/b.cuh": '#include "a.cuh"\n',
        "csrc/k.cu": '#include "b.cuh"\n__global__ void k() {}\n',
        "csrc/sub/m.cu": '#include "../b.cuh"\n',
        "csrc/unrelated.cu": "// #include \"a.cuh\"\n",
        "third_party/t.cu": '#include "../csrc/a.cuh"\n',
    })
    repo.branch("feature")
    repo.commit("edit header", {"csrc/a.cuh": "#pragma once\n#define X 2\n"})
    cs = changes.detect(repo.path, "main", "HEAD", policy())
    assert summary(cs) == {
        "csrc/a.cuh": ("cuda", "modified", ()),
        "csrc/b.cuh": ("cuda", "affected", ("csrc/a.cuh",)),
        "csrc/k.cu": ("cuda", "affected", ("csrc/a.cuh",)),
        "csrc/sub/m.cu": ("cuda", "affected", ("csrc/a.cuh",)),
    }
    assert cs.header_includers["csrc/a.cuh"] == (
        "csrc/b.cuh", "csrc/k.cu", "csrc/sub/m.cu", "third_party/t.cu")


def test_header_through_policy_include_dirs(repo: GitRepo) -> None:
    repo.commit("base", {"include/gg/common.h": "int x;\n", "csrc/k.cu": "#include <gg/common.h>\n"})
    repo.branch("feature")
    repo.commit("edit", {"include/gg/common.h": "int y;\n"})
    cs = changes.detect(repo.path, "main", "HEAD", policy(include_dirs=("include",)))
    assert summary(cs) == {"csrc/k.cu": ("cuda", "affected", ("include/gg/common.h",))}
    # Without the include dir the angled include is a system header: nothing is affected.
    assert changes.detect(repo.path, "main", "HEAD", policy()).kernels == []


def test_deleted_header_still_affects_its_includers(repo: GitRepo) -> None:
    repo.commit("base", {"csrc/a.cuh": "x\n", "csrc/k.cu": '#include "a.cuh"\n'})
    repo.branch("feature")
    repo.git("rm", "-q", "csrc/a.cuh")
    repo.commit("drop header")
    cs = changes.detect(repo.path, "main", "HEAD", policy())
    assert summary(cs) == {"csrc/a.cuh": ("cuda", "deleted", ()), "csrc/k.cu": ("cuda", "affected", ("csrc/a.cuh",))}


def test_python_change_affects_specs_that_import_it_transitively(repo: GitRepo) -> None:
    repo.commit("base", {
        "mylib/__init__.py": "",
        "mylib/ops/__init__.py": "",
        "mylib/ops/rms.py": "from . import util\n",
        "mylib/ops/util.py": "from ..helpers import scale\n",
        "mylib/helpers.py": "def scale(x):\n    return x\n",
        "gate/rms_gate.py": "from mylib.ops import rms\n",
        "gate/other_gate.py": "import torch\n",
        "gate/not_a_spec.py": "import mylib.helpers\n",
    })
    repo.branch("feature")
    repo.commit("edit helper", {"mylib/helpers.py": "def scale(x):\n    return 2 * x\n"})
    cs = changes.detect(repo.path, "main", "HEAD", policy())
    assert cs.affected_specs == ["gate/rms_gate.py"]
    assert cs.changed_modules == ["mylib/helpers.py"]
    assert cs.no_kernel_changes  # the helper defines no Triton kernel


def test_changed_spec_is_itself_affected(repo: GitRepo) -> None:
    repo.branch("feature")
    repo.commit("new spec", {"gate/new_gate.py": "import torch\n"})
    assert changes.detect(repo.path, "main", "HEAD", policy()).affected_specs == ["gate/new_gate.py"]


def test_unknown_ref_propagates_the_git_error(repo: GitRepo) -> None:
    from gpu_gate.errors import GitError
    with pytest.raises(GitError, match=r"^unknown git ref: nope "):
        changes.detect(repo.path, "nope", "HEAD", policy())


def test_ten_thousand_changed_files_are_fast(repo: GitRepo) -> None:
    repo.commit("base", {"csrc/common.cuh": "#pragma once\n"})
    repo.branch("feature")
    for i in range(10_000):
        if i % 4 == 0:
            repo.write(f"csrc/d{i % 40}/k{i}.cu", f'#include "../common.cuh"\n// {i}\n')
        elif i % 4 == 1:
            repo.write(f"mylib/d{i % 40}/t{i}.py", TRITON + f"# {i}\n")
        else:
            repo.write(f"docs/d{i % 40}/f{i}.md", f"{i}\n")
    repo.commit("many")
    start = time.monotonic()
    cs = changes.detect(repo.path, "main", "HEAD", policy())
    elapsed = time.monotonic() - start
    assert len(cs.files) == 10_000
    assert len(cs.kernels) == 5_000
    assert {k.language for k in cs.kernels} == {"cuda", "triton"}
    assert elapsed < 10.0, f"detect took {elapsed:.1f}s"


def test_deep_import_chain_reaches_the_spec(repo: GitRepo) -> None:
    chain = {f"mylib/m{i}.py": f"from mylib import m{i + 1}\n" for i in range(12)}
    repo.commit("base", {"mylib/__init__.py": "", **chain, "mylib/m12.py": "X = 1\n",
                         "gate/deep_gate.py": "import mylib.m0\n"})
    repo.branch("feature")
    repo.commit("edit the bottom", {"mylib/m12.py": "X = 2\n"})
    assert changes.detect(repo.path, "main", "HEAD", policy()).affected_specs == ["gate/deep_gate.py"]


def test_import_cycles_terminate(repo: GitRepo) -> None:
    repo.commit("base", {"mylib/__init__.py": "", "mylib/a.py": "from . import b\n", "mylib/b.py": "from . import a\n",
                         "gate/cyc_gate.py": "from mylib import a\n"})
    repo.branch("feature")
    repo.commit("edit", {"mylib/b.py": "from . import a\nY = 1\n"})
    assert changes.detect(repo.path, "main", "HEAD", policy()).affected_specs == ["gate/cyc_gate.py"]


def test_works_with_the_real_default_policy(repo: GitRepo) -> None:
    from gpu_gate.policy.models import Policy
    repo.branch("feature")
    repo.commit("k", {"ops/k.cu": "__global__ void k() {}\n", "third_party/x.cu": "\n", "ops/t.py": TRITON})
    cs = changes.detect(repo.path, "main", "HEAD", Policy())
    assert summary(cs) == {"ops/k.cu": ("cuda", "added", ()), "ops/t.py": ("triton", "added", ())}
