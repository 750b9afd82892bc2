"""The worker's copy of its spec's kept kernels (gpu_gate.worker.kept_kernels): made on a thread
while the worker imports torch and the spec, and waited for before the worker answers ``load``.
The sandboxed run, with the shelf read-only and the head's code trying to write it, is in
tests/store/test_compiled_store.py."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from gpu_gate.worker import kept_kernels


def _shelf(root: Path, n: int) -> Path:
    for i in range(n):
        entry = root / f"{i:032d}"
        entry.mkdir(parents=True)
        (entry / "k.cubin").write_bytes(b"\0" * 64)
        (entry / "__grp__k.json").write_text(json.dumps({"child_paths": {"k.cubin": "/elsewhere/k.cubin"}}))
    return root


def test_the_copy_runs_beside_the_worker_and_is_waited_for(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    shelf = _shelf(tmp_path / "shelf", 5)
    cache = tmp_path / "job" / ".cache" / "triton"
    monkeypatch.setenv("TRITON_CACHE_DIR", str(cache))
    seeding = kept_kernels.start({"shelf": str(shelf)})
    assert seeding is not None
    said = seeding.wait()
    assert said["seeded"] == 5 and said["seed_s"] >= 0 and said["seed_wait_s"] >= 0, said
    entry = cache / f"{0:032d}"
    # the copy's group file names the copy's own files
    assert json.loads((entry / "__grp__k.json").read_text())["child_paths"] == {"k.cubin": str(entry / "k.cubin")}
    # an entry the worker's Triton wrote first is left as it is
    (cache / f"{9:032d}").mkdir()
    (shelf / f"{9:032d}").mkdir()
    (shelf / f"{9:032d}" / "k.cubin").write_bytes(b"1")
    again = kept_kernels.start({"shelf": str(shelf)})
    assert again is not None and again.wait()["seeded"] == 0
    assert not (cache / f"{9:032d}" / "k.cubin").exists()


def test_no_shelf_or_no_cache_directory_no_copy(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TRITON_CACHE_DIR", str(tmp_path / "cache"))
    assert kept_kernels.start({}) is None
    assert kept_kernels.start({"shelf": str(tmp_path / "missing")}) is None
    monkeypatch.delenv("TRITON_CACHE_DIR")
    assert kept_kernels.start({"shelf": str(_shelf(tmp_path / "shelf", 1))}) is None
