"""The head's worker takes the kernels the base's worker compiled in the same job (see
gpu_gate.worker.base_kernels): Triton's cache looks in the base's cache, read-only, before it
compiles. The base's cache cannot be written from the head's sandbox, and the base's worker never
sees the head's."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from gpu_gate import sandbox
from gpu_gate.executor import ExecOptions, execute
from gpu_gate.findings import Severity, Status
from gpu_gate.jobs import Job, SpecRef
from gpu_gate.rules.judging import DIFFERENTIAL

triton_cache = pytest.importorskip("triton.runtime.cache")
knobs = pytest.importorskip("triton.knobs")


def _entry(root: Path, key: str, files: dict[str, bytes], group: str, written_at: Path) -> None:
    """A compiled kernel as Triton leaves it: its files, and a group that lists them by the
    absolute paths where they were written (another process's cache directory)."""
    d = root / key
    d.mkdir(parents=True)
    for name, blob in files.items():
        (d / name).write_bytes(blob)
    (d / f"__grp__{group}").write_text(json.dumps({"child_paths": {n: str(written_at / key / n) for n in files}}))


@pytest.fixture
def caches(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):  # type: ignore[no-untyped-def]
    from gpu_gate.worker import base_kernels

    own, base = tmp_path / "own", tmp_path / "base"
    own.mkdir()
    base.mkdir()
    monkeypatch.setenv("TRITON_CACHE_DIR", str(own))
    saved = knobs.cache.manager_class
    yield own, base, base_kernels
    knobs.cache.manager_class = saved
    base_kernels._FROM.clear()


def test_a_kernel_the_base_compiled_is_taken_into_the_heads_cache(caches) -> None:  # type: ignore[no-untyped-def]
    own, base, base_kernels = caches
    files = {"k.cubin": b"\x7fELF-cubin", "k.json": b'{"name": "k"}'}
    _entry(base, "KEY1", files, "k.json", Path("/elsewhere/b/.cache/triton"))
    assert base_kernels.install(base)
    cache = triton_cache.get_cache_manager("ab01")
    cache_key = cache.key
    # Triton names the entry by its key's digest: the base's entry is found under the same name
    (base / "KEY1").rename(base / cache_key)
    got = cache.get_group("k.json")
    assert got is not None and set(got) == set(files)
    for name, path in got.items():
        assert Path(path).parent == own / cache_key and Path(path).read_bytes() == files[name]
    # a second look finds it in the head's own cache now
    assert triton_cache.get_cache_manager("ab01").get_group("k.json") == got


def test_what_the_base_has_not_compiled_is_compiled_here(caches) -> None:  # type: ignore[no-untyped-def]
    own, base, base_kernels = caches
    assert base_kernels.install(base)
    cache = triton_cache.get_cache_manager("cd02")
    assert cache.get_group("k.json") is None
    # a group whose member is missing (the base still writing it) is not taken
    _entry(base, cache.key, {"k.cubin": b"x"}, "k.json", base)
    (base / cache.key / "k.cubin").unlink()
    assert cache.get_group("k.json") is None
    assert not (own / cache.key / "__grp__k.json").exists()


def test_without_a_mount_nothing_is_installed(tmp_path: Path) -> None:
    from gpu_gate.worker import base_kernels

    assert not base_kernels.install(tmp_path / "absent")
    assert knobs.cache.manager_class is None or knobs.cache.manager_class.__name__ != "TakesTheBases"


# --- through the executor: the mount, seen from the head's sandbox ----------------------------

SPEC = """\
import os
from pathlib import Path
import torch
import gpu_gate as gg
from mylib.ops import double

@gg.spec(dims={"n": gg.Dim(1, 64)}, inputs={"x": gg.Tensor(("n",), dtypes=["float32"])},
         reference=lambda x: x * 2)
def double_gate(x):
    return double(x)
"""

# The head's code looks for the base's cache where its sandbox shows it, and tries to plant a file
# there: were it writable, a binary planted there could make the base fail like the head, and the
# head's failures pass for debt. Its result says what it found: right where the mount is there and
# read-only, wrong otherwise.
PLANTS = """\
import os
from pathlib import Path

def _planted():
    mount = Path(os.environ["TRITON_CACHE_DIR"]).parents[1] / ".base-kernels"
    if not mount.is_dir():
        return "no mount"
    try:
        (mount / "planted").write_text("a binary the base would load")
    except OSError:
        return None
    return "written"

WHY = _planted()

def double(x):
    return x * 2 if WHY is None else x * 3
"""
BASE = "def double(x):\n    return x * 2\n"


def _tree(root: Path, ops: str) -> Path:
    (root / "mylib").mkdir(parents=True)
    (root / "mylib" / "__init__.py").write_text("")
    (root / "mylib" / "ops.py").write_text(ops)
    (root / "gate").mkdir()
    (root / "gate" / "double_gate.py").write_text(SPEC)
    return root


@pytest.mark.skipif(not sandbox.choose("auto").protects_files, reason="no sandbox that hides files here")
def test_the_heads_sandbox_shows_the_bases_cache_read_only(tmp_path: Path) -> None:
    head, base = _tree(tmp_path / "head", PLANTS), _tree(tmp_path / "base", BASE)
    job = Job(id="equivalence:gate/double_gate.py::double_gate", check="equivalence", level="required",
              kernels=(), spec=SpecRef("gate/double_gate.py", "double_gate"), seed=3,
              options={"cases": 6, "shrink": False, "growth": False, DIFFERENTIAL: "b" * 40})
    (tmp_path / "work").mkdir()
    [r] = execute([job], ExecOptions(repo_root=head, base_root=base, gpus=(), timeout_s=300,
                                     work_root=tmp_path / "work"))
    assert r.status is Status.PASSED, [f.message for f in r.findings if f.severity is Severity.ERROR]


class _Sibling:
    def __init__(self) -> None:
        self.asked: list[list[str]] = []

    def ahead(self, cases: list[str]) -> None:
        self.asked.append(list(cases))


@pytest.mark.parametrize("takes", [True, False])
def test_the_heads_sibling_compiles_from_the_last_case_back_where_it_takes_the_bases(takes: bool) -> None:
    """The base's sibling compiles the cases' kernels from the first case on, the head's from the
    last back: between them each shared kernel is compiled once. A head that cannot take the base's
    kernels compiles them all in the cases' order, as its worker meets them."""
    import types

    from gpu_gate.checks.equivalence import Equivalence

    head, base = _Sibling(), _Sibling()
    eq = Equivalence.__new__(Equivalence)
    eq.ctx = types.SimpleNamespace(device="cuda")  # type: ignore[assignment]
    eq.sanitized, eq.ahead_started = False, {}
    eq.job = types.SimpleNamespace(case=None)  # type: ignore[assignment]
    eq.workers = types.SimpleNamespace(uses_triton=True, candidate=head, base=base,  # type: ignore[assignment]
                                       takes_base_kernels=takes)
    cases = ["c0", "c1", "c2", "c3"]
    eq._compile_ahead(cases)
    assert base.asked == [cases]
    assert head.asked == [cases[::-1] if takes else cases]
    assert eq.ahead_started == {"head": "started", "base": "started"}
