"""The worker's record of the repository files the code under review opens or loads."""
from __future__ import annotations

import ctypes
import ctypes.util
import json
import shutil
from pathlib import Path

import pytest

from gpu_gate.worker import reads


def test_opens_and_loads_under_the_root_are_recorded(tmp_path: Path) -> None:
    root = tmp_path / "repo"
    (root / "configs").mkdir(parents=True)
    (root / "configs" / "table.json").write_text('{"block": 64}')
    (tmp_path / "outside.txt").write_text("x")
    import _ctypes  # an extension module: a shared object dlopen can load from a copy

    found = Path(_ctypes.__file__)
    libm = ctypes.util.find_library("m")
    shutil.copy(found, root / "libkernel.so")
    (root / "work").mkdir()
    (root / "work" / "context.json").write_text("{}")
    rec = reads.start(root, ignore=root / "work")
    try:
        json.loads((root / "configs" / "table.json").read_text())
        (root / "work" / "context.json").read_text()  # the worker's own directory
        (tmp_path / "outside.txt").read_text()
        ctypes.CDLL(str(root / "libkernel.so"))
        if libm is not None:
            ctypes.CDLL(libm)  # the system's, by name
        with pytest.raises(OSError):
            open(root / "missing.json")
    finally:
        reads.stop(rec)
    (root / "configs" / "table.json").read_text()  # after: not recorded
    assert rec.to_json() == ["configs/table.json", "libkernel.so"]


def test_the_record_is_capped(tmp_path: Path) -> None:
    for i in range(reads.MAX_READS + 5):
        (tmp_path / f"f{i}").write_text("x")
    rec = reads.start(tmp_path)
    try:
        for i in range(reads.MAX_READS + 5):
            (tmp_path / f"f{i}").read_text()
    finally:
        reads.stop(rec)
    assert len(rec.to_json()) == reads.MAX_READS and rec.dropped == 5
