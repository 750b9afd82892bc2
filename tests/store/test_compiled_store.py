"""Compiled kernels kept between runs: only what the base's code compiled, seeded into every worker.

The store is the gate's: a pull request's code cannot put an entry in it, neither through its own
JIT cache directory (which is never harvested) nor by writing the store's directory (no sandbox
shows it). The base's worker sees the base's tree at the repository's own path, so what it compiles
carries the paths the head's code would. Real git repositories, real sandboxes, on the CPU: the
"kernels" below stand in for Triton by writing entries into ``$TRITON_CACHE_DIR`` as Triton does.
"""
from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest

from conftest_git import GitRepo
from gpu_gate.store import compiled as compiled_store
from test_cli import gate

pytestmark = pytest.mark.skipif(shutil.which("bwrap") is None, reason="bubblewrap is not installed (CI installs it)")

BASE_KEY = "b" * 32  # what the base's code compiles
HEAD_KEY = "h" * 32  # what only the head's code compiles

POLICY = """\
version: 1
kernels: {include: ["csrc/**/*.cu"]}
specs: ["gate/**/*_gate.py"]
not_run: warn
checks:
  compile: off
  determinism: off
  memcheck: off
  racecheck: off
  synccheck: off
  initcheck: off
  # the kernel reads the worker's cache directories (it checks the store): a process without them differs
  equivalence: {cases: 4, growth: false, shrink: false, seed: 7, disguised_replay: false}
"""

# The base's wrapper "compiles" its kernel on first use: an entry named by its key, holding the
# path of the source it was compiled from (as line info would).
BASE_OPS = f"""\
import os
import pathlib


def row_sum(x):
    d = pathlib.Path(os.environ["TRITON_CACHE_DIR"]) / "{BASE_KEY}"
    if not d.exists():
        d.mkdir(parents=True)
        (d / "kernel.json").write_text(os.path.abspath(__file__))
    return x.double().sum(-1).to(x.dtype)
"""

# The head's: right only when it finds the base's kernel already compiled (so the verdict says
# whether the store reached its worker). It also plants an entry of its own, and tries to write
# the store itself wherever it might be.
HEAD_OPS = f"""\
import json
import os
import pathlib


def _plant():
    d = pathlib.Path(os.environ["TRITON_CACHE_DIR"]) / "{HEAD_KEY}"
    d.mkdir(parents=True, exist_ok=True)
    (d / "kernel.json").write_text("planted by the head")
    root = pathlib.Path(__file__).resolve().parents[2]
    shelves = list(root.glob(".gpu-gate/**/compiled/*"))
    try:  # the shelf its worker is shown (read-only), named in the worker's own context file
        shelves.append(pathlib.Path(os.environ["TMPDIR"]) / ".kept")
    except (OSError, KeyError, ValueError):
        pass
    for store in shelves:
        try:
            (store / "{BASE_KEY}" / "kernel.json").write_text("poisoned")
        except OSError:
            pass
        try:
            (store / "{HEAD_KEY}").mkdir()
            (store / "{HEAD_KEY}" / "kernel.json").write_text("planted in the store")
        except OSError:
            pass


def row_sum(x):
    _plant()
    warm = (pathlib.Path(os.environ["TRITON_CACHE_DIR"]) / "{BASE_KEY}" / "kernel.json").is_file()
    s = x.double().sum(-1).to(x.dtype)
    return s if warm else s + 1
"""

SPEC = """\
import torch
import gpu_gate as gg
from mylib.ops import row_sum


@gg.spec(dims={"rows": gg.Dim(1, 16), "n": gg.Dim(1, 64)},
         inputs={"x": gg.Tensor(("rows", "n"), dtypes=["float32"])},
         reference=lambda x: x.sum(-1),
         covers=["csrc/rows.cu"],
         devices=["cuda", "cpu"])
def row_sum_gate(x):
    return row_sum(x)
"""

KERNEL = "__global__ void rows(const float* x, float* y, int n) { /* row sums */ }\n"


def _repo(make_repo) -> GitRepo:  # type: ignore[no-untyped-def]
    # .gitignore as `gpu-gate init` writes it: the store lives in .gpu-gate/, which no commit may carry
    r = make_repo("proj", {".gpu-gate.yml": POLICY, ".gitignore": ".gpu-gate/\n", "mylib/__init__.py": "", "mylib/ops.py": BASE_OPS,
                           "csrc/rows.cu": KERNEL, "gate/rows_gate.py": SPEC})
    r.branch("feature")
    r.commit("pull request", {"mylib/ops.py": HEAD_OPS, "csrc/rows.cu": KERNEL.replace("int n)", "int n, int tuned)")})
    return r


def _check(r: GitRepo, cache: Path) -> tuple[int, str, dict]:  # type: ignore[type-arg]
    p = gate("check", "--base", "main", "--cpu", "--cache-dir", str(cache), cwd=r.path)
    out = r.path / ".gpu-gate" / "out"
    results = json.loads((out / "results.json").read_text()) if (out / "results.json").exists() else {}
    return p.returncode, p.stdout + p.stderr, results


def _entries(cache: Path) -> dict[str, str]:
    return {e.name: (e / "kernel.json").read_text() for e in (cache / "compiled").glob("*/*") if e.is_dir()}


def _equivalence(results: dict) -> str:  # type: ignore[type-arg]
    return next(r["status"] for r in results["results"] if r["check"] == "equivalence")


def test_the_store_keeps_the_bases_kernels_and_seeds_the_next_run(make_repo) -> None:  # type: ignore[no-untyped-def]
    r = _repo(make_repo)
    cache = r.path / ".gpu-gate" / "cache"  # the default place, inside the repository
    code, text, results = _check(r, cache)
    # First run: nothing kept yet, so the head's code is cold (and wrong, by construction).
    assert _equivalence(results) == "failed", text
    kept = _entries(cache)
    # Only the base's kernel, compiled from the base's tree seen at the repository's own path.
    assert kept == {BASE_KEY: str(r.path.resolve() / "mylib" / "ops.py")}, kept
    # Nothing changed in the store through the head's attempts.
    r.commit("again", {"csrc/rows.cu": KERNEL.replace("int n)", "int n, int tuned, int twice)")})
    code, text, results = _check(r, cache)
    assert _equivalence(results) == "passed", text  # the head's worker started with the base's kernel
    assert _entries(cache) == kept
    # each worker copied the kept kernel itself; the base's too, though its sandbox shows the base's
    # tree where the store (inside the repository here) would be
    timing = next(r for r in results["results"] if r["check"] == "equivalence")["extra"]["timing"]
    assert timing["load_seeded"] == 1 and timing["base_load_seeded"] == 1, timing


def test_harvest_takes_only_well_formed_entries(tmp_path: Path) -> None:
    src, shelf = tmp_path / "src", tmp_path / "shelf"
    good = src / ("a" * 32)
    good.mkdir(parents=True)
    (good / "k.cubin").write_bytes(b"\x7fELF")
    (src / "short").mkdir()  # not a key
    (src / "short" / "f").write_text("x")
    linked = src / ("c" * 32)
    linked.mkdir()
    (linked / "k.cubin").symlink_to("/etc/hostname")  # a link out of the cache
    (src / ("d" * 32)).symlink_to(good)  # an entry that is a link
    (src / ("e" * 32)).write_text("a file, not an entry")
    assert compiled_store.harvest(src, shelf) == 1
    assert sorted(p.name for p in shelf.iterdir() if not p.name.startswith(".")) == ["a" * 32]
    assert compiled_store.harvest(src, shelf) == 0  # already kept
    dest = tmp_path / "worker" / "triton"
    assert compiled_store.seed(shelf, dest) == 1
    assert (dest / ("a" * 32) / "k.cubin").read_bytes() == b"\x7fELF"
    assert not (dest / ("a" * 32)).is_symlink() and os.stat(dest / ("a" * 32) / "k.cubin").st_ino != \
        os.stat(shelf / ("a" * 32) / "k.cubin").st_ino  # a copy: the worker's writes stay its own


def test_a_seeded_entrys_group_file_names_the_copys_own_files(tmp_path: Path) -> None:
    """Triton finds a compiled kernel through its group file, which lists the members by absolute
    path: left pointing at the directory it was compiled in (gone with that job), every seeded
    kernel would be compiled again."""
    src, shelf, dest = tmp_path / "base-job" / "triton", tmp_path / "shelf", tmp_path / "next-job" / "triton"
    key = "K" * 52
    (src / key).mkdir(parents=True)
    for name in ("k.cubin", "k.json"):
        (src / key / name).write_text(name)
    (src / key / "__grp__k.json").write_text(json.dumps(
        {"child_paths": {n: str(src / key / n) for n in ("k.cubin", "k.json")}}))
    compiled_store.harvest(src, shelf)
    shutil.rmtree(tmp_path / "base-job")
    compiled_store.seed(shelf, dest)
    children = json.loads((dest / key / "__grp__k.json").read_text())["child_paths"]
    assert children == {n: str(dest / key / n) for n in ("k.cubin", "k.json")}
    assert all(Path(p).is_file() for p in children.values())


def test_the_shelf_drops_its_oldest_entries_past_its_size(tmp_path: Path) -> None:
    shelf = tmp_path / "shelf"
    for i, name in enumerate(("x" * 32, "y" * 32, "z" * 32)):
        (shelf / name).mkdir(parents=True)
        (shelf / name / "k.cubin").write_bytes(b"0" * 1000)
        os.utime(shelf / name, (1000 + i, 1000 + i))
    assert compiled_store.prune(shelf, max_bytes=2000) == 1
    assert sorted(p.name for p in shelf.iterdir()) == ["y" * 32, "z" * 32]


# A future kernel of the head: right only when its worker starts with the binary "compiled" under its
# key (as a correct binary planted under a buggy kernel's key would make it look right).
FUTURE_OPS = f"""\
import os
import pathlib


def row_sum(x):
    kept = pathlib.Path(os.environ["TRITON_CACHE_DIR"]) / "{HEAD_KEY}" / "kernel.json"
    s = x.double().sum(-1).to(x.dtype)
    return s if kept.is_file() and kept.read_text() == "a correct binary" else s + 1
"""


def test_an_entry_planted_by_hand_in_the_store_never_reaches_a_worker(make_repo) -> None:  # type: ignore[no-untyped-def]
    r = _repo(make_repo)
    cache = r.path.parent / "cache"
    _check(r, cache)  # the base's kernel is harvested, with its digest
    (shelf,) = [p for p in (cache / "compiled").iterdir() if p.is_dir()]
    planted = shelf / HEAD_KEY
    planted.mkdir()
    (planted / "kernel.json").write_text("a correct binary")
    tampered = shelf / BASE_KEY / "kernel.json"  # a kept entry changed after the gate harvested it
    original = tampered.read_text()
    tampered.write_text(original + " ")
    r.commit("future kernel", {"mylib/ops.py": FUTURE_OPS, "csrc/rows.cu": KERNEL.replace("int n)", "int n, int v2)")})
    code, text, results = _check(r, cache)
    assert _equivalence(results) == "failed", text  # its worker started without the planted binary
    job = next(x for x in results["results"] if x["check"] == "equivalence")
    notes = [f for f in job["findings"] if f["kind"] == "store-entry-dropped"]
    assert len(notes) == 1 and sorted(notes[0]["details"]["dropped"]) == sorted([BASE_KEY, HEAD_KEY]), notes
    assert not planted.exists()
    assert tampered.read_text() == original  # the base's worker compiled it again, and the gate kept that


def test_verify_keeps_what_the_gate_harvested_and_drops_the_rest(tmp_path: Path) -> None:
    src, shelf = tmp_path / "src", tmp_path / "shelf"
    (src / ("a" * 32)).mkdir(parents=True)
    (src / ("a" * 32) / "k.cubin").write_bytes(b"\x7fELF")
    compiled_store.harvest(src, shelf)
    (shelf / ("p" * 32)).mkdir()
    (shelf / ("p" * 32) / "k.cubin").write_bytes(b"planted")
    assert compiled_store.verify(shelf) == ["p" * 32]
    assert compiled_store.verify(shelf) == []  # the harvested entry stays, and seeds
    assert compiled_store.seed(shelf, tmp_path / "w") == 1
