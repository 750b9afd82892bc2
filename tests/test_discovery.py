"""Static spec discovery and coverage of changed kernels, on real repositories."""
from __future__ import annotations

import textwrap
from types import SimpleNamespace

from gpu_gate import changes, discovery
from gpu_gate.findings import Finding, Severity
from conftest_git import GitRepo, git_env, make_repo, repo  # noqa: F401  (fixtures)

POLICY = SimpleNamespace(
    kernels=SimpleNamespace(include=("csrc/**/*.cu", "csrc/**/*.cuh", "mylib/**/*.py"), exclude=()),
    specs=("gate/**/*_gate.py",),
    cuda=SimpleNamespace(include_dirs=()),
)
TRITON = "import triton\n\n@triton.jit\ndef k(x):\n    pass\n"


def d(src: str) -> str:
    return textwrap.dedent(src).lstrip()


def specs_by_id(repo: GitRepo, rev: str | None = "HEAD") -> dict[str, discovery.SpecInfo]:
    return {s.id: s for s in discovery.discover_specs(repo.path, rev, POLICY)}


def test_spec_decorators_under_every_alias(repo: GitRepo) -> None:
    repo.commit("specs", {
        "gate/a_gate.py": d("""
            import gpu_gate as gg
            @gg.spec(dims={})
            def one(x): return x
            def helper(): pass
        """),
        "gate/b_gate.py": d("""
            from gpu_gate import spec as S
            import gpu_gate
            @S()
            def two(x): return x
            @gpu_gate.spec
            def three(x): return x
        """),
        "gate/c_gate.py": d("""
            import pytest
            from otherlib import spec
            @spec()
            def not_ours(): pass
            @pytest.fixture
            def fixture(): pass
        """),
        "gate/helpers.py": "import gpu_gate as gg\n@gg.spec()\ndef outside_globs(): pass\n",
    })
    found = specs_by_id(repo)
    assert sorted(found) == ["gate/a_gate.py::one", "gate/b_gate.py::three", "gate/b_gate.py::two"]
    assert found["gate/a_gate.py::one"].line == 2


def test_literal_covers_checks_and_name(repo: GitRepo) -> None:
    repo.commit("spec", {"gate/x_gate.py": d("""
        import gpu_gate as gg
        @gg.spec(name="rms", covers=["csrc/rms.cu", "csrc/rms/*.cuh"], checks=("equivalence", "memcheck"))
        def rms_gate(x): return x
        @gg.spec(covers="csrc/one.cu")
        def single(x): return x
    """)})
    found = specs_by_id(repo)
    assert found["gate/x_gate.py::rms"].covers == ("csrc/rms.cu", "csrc/rms/*.cuh")
    assert found["gate/x_gate.py::rms"].checks == ("equivalence", "memcheck")
    assert found["gate/x_gate.py::single"].covers == ("csrc/one.cu",)
    assert found["gate/x_gate.py::single"].checks is None


def test_non_literal_covers_is_a_warning(repo: GitRepo) -> None:
    repo.commit("spec", {"gate/x_gate.py": d("""
        import gpu_gate as gg
        FILES = ["csrc/a.cu"]
        @gg.spec(covers=FILES)
        def dyn(x): return x
    """)})
    result = discovery.discover(repo.path, "HEAD", POLICY)
    assert [s.covers for s in result.specs] == [()]
    assert result.findings == [Finding(
        check="coverage", kind="spec-not-static", severity=Severity.WARNING, spec="gate/x_gate.py::dyn",
        file="gate/x_gate.py", line=3,
        message='gate/x_gate.py:3: covers= of spec dyn is not a literal list of strings, so gpu-gate cannot '
                'read it without importing the spec (write covers=["...", ...])')]


def test_spec_file_that_does_not_parse_is_a_finding(repo: GitRepo) -> None:
    repo.commit("spec", {"gate/bad_gate.py": "import gpu_gate as gg\n@gg.spec(\ndef f(): pass\n"})
    result = discovery.discover(repo.path, "HEAD", POLICY)
    assert result.specs == []
    assert [(f.kind, f.file, f.line) for f in result.findings] == [("parse-error", "gate/bad_gate.py", 2)]
    assert result.findings[0].message.startswith("gate/bad_gate.py:2: cannot parse Python: ")


def test_imports_are_transitive_and_relative(repo: GitRepo) -> None:
    repo.commit("spec", {
        "mylib/__init__.py": "",
        "mylib/ops.py": "from .kernels import rms\n",
        "mylib/kernels/__init__.py": "",
        "mylib/kernels/rms.py": "from . import common\n",
        "mylib/kernels/common.py": "",
        "gate/rms_gate.py": "import gpu_gate as gg\nfrom mylib.ops import *\n@gg.spec()\ndef g(): pass\n",
    })
    [spec] = discovery.discover_specs(repo.path, "HEAD", POLICY)
    assert spec.imports == frozenset({
        "mylib/__init__.py", "mylib/ops.py", "mylib/kernels/__init__.py", "mylib/kernels/rms.py",
        "mylib/kernels/common.py"})


def test_worktree_sees_uncommitted_specs(repo: GitRepo) -> None:
    repo.write("gate/new_gate.py", "import gpu_gate as gg\n@gg.spec()\ndef fresh(): pass\n")
    assert list(specs_by_id(repo, None)) == ["gate/new_gate.py::fresh"]
    assert specs_by_id(repo, "HEAD") == {}


# --- coverage -------------------------------------------------------------------------------------

def _kernel_repo(repo: GitRepo, changed: dict[str, str], base: dict[str, str] | None = None) -> changes.ChangeSet:
    repo.commit("base", {
        "mylib/__init__.py": "",
        "mylib/tk.py": TRITON,
        "mylib/wrap.py": "from .tk import k\n",
        "csrc/x.cu": '#include "common.cuh"\n',
        "csrc/y.cu": "// y\n",
        "csrc/common.cuh": "// c\n",
        **(base or {}),
    })
    repo.branch("feature")
    repo.commit("change", changed)
    return changes.detect(repo.path, "main", "HEAD", POLICY)


def test_triton_kernel_covered_through_transitive_import(repo: GitRepo) -> None:
    cs = _kernel_repo(repo, {"mylib/tk.py": TRITON + "V2 = 2\n"}, {
        "gate/tk_gate.py": "import gpu_gate as gg\nfrom mylib.wrap import k\n@gg.spec()\ndef tk(): pass\n",
        "gate/unrelated_gate.py": "import gpu_gate as gg\n@gg.spec()\ndef other(): pass\n",
    })
    specs = discovery.discover_specs(repo.path, cs.head, POLICY)
    assert discovery.coverage(cs, specs) == {"mylib/tk.py": ["gate/tk_gate.py::tk"]}


def test_cuda_file_covered_by_a_string_literal_path(repo: GitRepo) -> None:
    cs = _kernel_repo(repo, {"csrc/x.cu": "int v2;\n", "csrc/y.cu": "int v2;\n"}, {
        "gate/x_gate.py": d("""
            import gpu_gate as gg
            mod = gg.cuda.load("csrc/x.cu", name="x")
            @gg.spec()
            def x(): pass
        """),
        "gate/y_gate.py": d("""
            import gpu_gate as gg
            mod = gg.cuda.load("../csrc/y.cu")
            @gg.spec()
            def y(): pass
        """),
    })
    specs = discovery.discover_specs(repo.path, cs.head, POLICY)
    assert discovery.coverage(cs, specs) == {"csrc/x.cu": ["gate/x_gate.py::x"], "csrc/y.cu": ["gate/y_gate.py::y"]}


def test_explicit_covers_wins_over_imports(repo: GitRepo) -> None:
    cs = _kernel_repo(repo, {"mylib/tk.py": TRITON + "V2 = 2\n", "csrc/y.cu": "int v2;\n"}, {
        "gate/k_gate.py": d("""
            import gpu_gate as gg
            from mylib.tk import k
            @gg.spec(covers=["csrc/*.cu"])
            def only_cuda(): pass
        """),
    })
    specs = discovery.discover_specs(repo.path, cs.head, POLICY)
    assert discovery.coverage(cs, specs) == {"csrc/y.cu": ["gate/k_gate.py::only_cuda"], "mylib/tk.py": []}


def test_changed_header_covered_by_specs_of_its_includers(repo: GitRepo) -> None:
    cs = _kernel_repo(repo, {"csrc/common.cuh": "int v2;\n"}, {
        "gate/x_gate.py": "import gpu_gate as gg\n@gg.spec(covers=['csrc/x.cu'])\ndef x(): pass\n",
    })
    specs = discovery.discover_specs(repo.path, cs.head, POLICY)
    assert discovery.coverage(cs, specs) == {
        "csrc/common.cuh": ["gate/x_gate.py::x"], "csrc/x.cu": ["gate/x_gate.py::x"]}


def test_uncovered_kernel_is_an_error_finding(repo: GitRepo) -> None:
    cs = _kernel_repo(repo, {"csrc/y.cu": "int v2;\n"})
    cov = discovery.coverage(cs, discovery.discover_specs(repo.path, cs.head, POLICY))
    assert cov == {"csrc/y.cu": []}
    assert discovery.uncovered(cov, POLICY.specs) == [Finding(
        check="coverage", kind="uncovered", severity=Severity.ERROR, file="csrc/y.cu",
        message="csrc/y.cu changed but no gate spec covers it (add a spec under gate/**/*_gate.py "
                "or list it in covers=)")]


def test_deleted_kernels_need_no_spec(repo: GitRepo) -> None:
    repo.commit("base", {"csrc/old.cu": "// x\n"})
    repo.branch("feature")
    repo.git("rm", "-q", "csrc/old.cu")
    repo.commit("drop")
    cs = changes.detect(repo.path, "main", "HEAD", POLICY)
    assert [(k.path, k.status) for k in cs.kernels] == [("csrc/old.cu", "deleted")]
    cov = discovery.coverage(cs, [])
    assert cov == {} and discovery.uncovered(cov, POLICY.specs) == []


def test_annotate_records_specs_on_kernels(repo: GitRepo) -> None:
    cs = _kernel_repo(repo, {"csrc/y.cu": "int v2;\n"}, {
        "gate/y_gate.py": "import gpu_gate as gg\n@gg.spec(covers=['csrc/y.cu'])\ndef y(): pass\n"})
    discovery.annotate(cs, discovery.coverage(cs, discovery.discover_specs(repo.path, cs.head, POLICY)))
    assert [(k.path, k.specs) for k in cs.kernels] == [("csrc/y.cu", ("gate/y_gate.py::y",))]


def test_reusing_the_changesets_import_graph(repo: GitRepo) -> None:
    cs = _kernel_repo(repo, {"mylib/tk.py": TRITON + "V2 = 2\n", "mylib/broken.py": "def (:\n"}, {
        "gate/tk_gate.py": "import gpu_gate as gg\nfrom mylib import wrap, broken\n@gg.spec()\ndef tk(): pass\n"})
    assert [f.file for f in cs.parse_errors] == ["mylib/broken.py"]
    fresh = discovery.discover(repo.path, "HEAD", POLICY)
    reused = discovery.discover(repo.path, "HEAD", POLICY, graph=cs.import_graph)
    assert reused.specs == fresh.specs
    assert [f.file for f in fresh.findings] == ["mylib/broken.py"]
    assert reused.findings == []  # already reported by the change set
    assert discovery.coverage(cs, reused.specs)["mylib/tk.py"] == ["gate/tk_gate.py::tk"]
