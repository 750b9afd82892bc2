"""What earlier runs read of the repository's modules (gpu_gate.store.scans): the same plan with or
without it, an edit read afresh, and a store that the pull request's own commit carries refused
(the attack: an entry that hides the import through which a changed wrapper selects a spec).
Real git repositories, ``gpu-gate plan`` in a subprocess."""
from __future__ import annotations

import json
from pathlib import Path

from conftest_git import GitRepo
from test_cli import gate

from gpu_gate.store.scans import ScanStore

POLICY = "version: 1\nkernels: {include: [\"kernels/**\"]}\nspecs: [\"gate/**/*_gate.py\"]\n"
KERNEL = "import triton\nimport triton.language as tl\n\n\n@triton.jit\ndef k(x):\n    pass\n"
WRAPPER = "from kernels.k import k\n\n\ndef scale(x):\n    return x * 2\n"
SPEC = """\
import gpu_gate as gg
from lib.ops import scale


@gg.spec(dims={"n": gg.Dim(1, 8)}, inputs={"x": gg.Tensor(("n",))}, reference=lambda x: x * 2)
def scale_gate(x):
    return scale(x)
"""


def _repo(make_repo) -> GitRepo:  # type: ignore[no-untyped-def]
    r = make_repo("proj", {".gpu-gate.yml": POLICY, "kernels/__init__.py": "", "kernels/k.py": KERNEL,
                           "lib/__init__.py": "", "lib/ops.py": WRAPPER, "gate/scale_gate.py": SPEC})
    r.branch("feature")
    return r


def _plan(r: GitRepo, *args: str) -> dict:  # type: ignore[type-arg]
    p = gate("plan", "--base", "main", *args, cwd=r.path)
    assert p.returncode == 0, p.stdout + p.stderr
    return json.loads(p.stdout)


def _selected(plan: dict) -> list[str]:  # type: ignore[type-arg]
    return sorted(plan["selected"])


def test_the_store_gives_the_same_plan_and_an_edit_is_read_afresh(make_repo, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    r = _repo(make_repo)
    r.commit("wrapper", {"lib/ops.py": WRAPPER.replace("x * 2", "x * 2.0")})
    cache = tmp_path / "cache"
    plain = _plan(r, "--no-cache")
    first = _plan(r, "--cache-dir", str(cache))
    assert any((cache / "scan").rglob("*.json")), "the first run writes what it read"
    again = _plan(r, "--cache-dir", str(cache))
    assert _selected(plain) == _selected(first) == _selected(again) == ["gate/scale_gate.py::scale_gate"]
    assert plain["jobs"] == first["jobs"] == again["jobs"]
    # the spec stops importing the wrapper: read afresh (new bytes), no longer selected by it
    r.commit("unhook", {"gate/scale_gate.py": SPEC.replace("from lib.ops import scale", "scale = None")})
    r.commit("wrapper again", {"lib/ops.py": WRAPPER.replace("x * 2", "x * 3")})
    after = _plan(r, "--cache-dir", str(cache))
    assert "imports lib/ops.py" not in json.dumps(after["selected"])


def _forge(store_dir: Path, r: GitRepo, path: str) -> None:
    """An entry for ``path``'s bytes at the head that says it imports nothing."""
    ScanStore(store_dir).put((r.path / path).read_bytes(), path, frozenset(), frozenset())


def test_a_store_the_commit_carries_is_not_used(make_repo) -> None:  # type: ignore[no-untyped-def]
    """The pull request changes the wrapper and commits, in the default cache directory, an entry
    saying the spec imports nothing. Read, it would leave the changed wrapper selecting no spec."""
    r = _repo(make_repo)
    r.write("lib/ops.py", WRAPPER.replace("x * 2", "x * 2.0"))
    _forge(r.path / ".gpu-gate" / "cache" / "scan", r, "gate/scale_gate.py")
    r.git("add", "-f", ".gpu-gate/cache")
    r.commit("wrapper, and a scan entry")
    plan = _plan(r)
    assert _selected(plan) == ["gate/scale_gate.py::scale_gate"], plan["selected"]
    assert "imports lib/ops.py, changed" in json.dumps(plan["selected"])


def test_the_runners_own_store_is_read(make_repo, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    """The twin, and what the rule protects: the same entry in a cache directory outside the
    repository (the runner's own, written only by gpu-gate) is read. This is the trust the result
    cache already has; a directory the pull request can write is what must never be read."""
    r = _repo(make_repo)
    r.commit("wrapper", {"lib/ops.py": WRAPPER.replace("x * 2", "x * 2.0")})
    cache = tmp_path / "runner-cache"
    _forge(cache / "scan", r, "gate/scale_gate.py")
    assert _selected(_plan(r, "--cache-dir", str(cache))) == []
    assert _selected(_plan(r, "--no-cache")) == ["gate/scale_gate.py::scale_gate"]


# --- the kernels a module defines (the rules' reading of which kernel files a spec judges) ---------------


def test_kernel_entries_serve_a_second_read_and_new_bytes_are_read_afresh(tmp_path: Path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    from gpu_gate import kernelscan
    from gpu_gate.rules import judged
    from gpu_gate.store import scans

    store = ScanStore(tmp_path / "scan")
    source = KERNEL.encode()
    with scans.using(store):
        assert judged.python_kernels(source, "kernels/k.py") == frozenset({"k"})
        assert judged.python_kernels(b"x = 1\n", "lib/plain.py") is None  # no kernel file: an answer too
    assert store.get_kernels(source, "kernels/k.py") == frozenset({"k"})
    assert store.get_kernels(b"x = 1\n", "lib/plain.py") is None

    def unread(*_: object) -> None:
        raise AssertionError("read again")

    judged._READ.clear()  # a new process: only the store remembers
    monkeypatch.setattr(kernelscan, "scan", unread)
    with scans.using(store):
        assert judged.python_kernels(source, "kernels/k.py") == frozenset({"k"})
        assert judged.python_kernels(b"x = 1\n", "lib/plain.py") is None
    monkeypatch.undo()
    edited = source + b"\n\n@triton.jit\ndef k2(x):\n    pass\n"
    with scans.using(store):
        assert judged.python_kernels(edited, "kernels/k.py") == frozenset({"k", "k2"})
    assert store.get_kernels(source, "kernels/k.py") == frozenset({"k"})  # the old bytes' entry stands
    assert store.get_kernels(source, "kernels/other.py") is scans.MISS  # the path is part of the key

