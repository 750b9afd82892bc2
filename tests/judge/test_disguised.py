"""The disguised replay's judge side (gpu_gate.judge.disguised): what it reads of the program's files, and
what it refuses to read. The program is the code under review's: its files are claims, bounded by what the
reference says the outputs are."""
from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
import torch

from gpu_gate.executor.disguised import gate_files
from gpu_gate.judge.disguised import MAX_INDEX_BYTES, Launch, NotRun, program_text, read_results


def _launch(tmp_path: Path) -> Launch:
    return Launch(("python", "train.py"), {}, tmp_path, tmp_path)


def _write(d: Path, index: object, blob: bytes) -> None:
    (d / "out.json").write_text(json.dumps(index))
    (d / "out.bin").write_bytes(blob)


def _truth(shape: tuple[int, ...]):  # type: ignore[no-untyped-def]
    seen: list[dict[str, str]] = []

    def truth_of(i: int, dtypes: dict[str, str]) -> dict[str, torch.Tensor]:
        seen.append(dtypes)
        return {"out": torch.zeros(shape, dtype=torch.float64)}

    return truth_of, seen


def test_an_output_is_read_as_the_reference_shapes_it(tmp_path: Path) -> None:
    t = torch.arange(6, dtype=torch.float32).reshape(2, 3)
    raw = t.reshape(-1).view(torch.uint8).numpy().tobytes()
    _write(tmp_path, {"load": {"status": "ok"}, "results": [
        {"status": "ok", "outputs": {"out": {"kind": "tensor", "dtype": "float32", "shape": [2, 3], "at": 0,
                                              "nbytes": len(raw)}}}]}, raw)
    truth_of, seen = _truth((2, 3))
    [ran] = read_results(_launch(tmp_path), 1, "cpu", truth_of)
    assert ran.status == "ok" and torch.equal(ran.outputs["out"], t)
    assert seen == [{"out": "float32"}]


@pytest.mark.parametrize("meta", [
    {"kind": "tensor", "dtype": "float32", "shape": [4, 4], "at": 0, "nbytes": 64},  # not the reference's shape
    {"kind": "tensor", "dtype": "float32", "shape": [2, 3], "at": 0, "nbytes": 1 << 30},  # claims more bytes
    {"kind": "tensor", "dtype": "object", "shape": [2, 3], "at": 0, "nbytes": 24},  # no such dtype
    {"kind": "tensor", "dtype": "float32", "shape": [2, 3], "at": 1 << 40, "nbytes": 24},  # past the file's end
])
def test_a_claim_beyond_the_references_outputs_is_not_read(tmp_path: Path, meta: dict[str, object]) -> None:
    _write(tmp_path, {"load": {"status": "ok"}, "results": [{"status": "ok", "outputs": {"out": meta}}]}, b"\0" * 64)
    truth_of, _ = _truth((2, 3))
    [ran] = read_results(_launch(tmp_path), 1, "cpu", truth_of)
    assert ran.status == "ok" and "out" not in ran.outputs and "out" in ran.others


def test_links_and_oversized_indexes_are_refused(tmp_path: Path) -> None:
    secret = tmp_path.parent / "secret.json"
    secret.write_text(json.dumps({"load": {"status": "ok"}, "results": []}))
    os.symlink(secret, tmp_path / "out.json")
    (tmp_path / "out.bin").write_bytes(b"")
    with pytest.raises(NotRun, match="cannot be opened"):
        read_results(_launch(tmp_path), 1, "cpu", _truth((1,))[0])
    os.unlink(tmp_path / "out.json")
    (tmp_path / "out.json").write_text(" " * (MAX_INDEX_BYTES + 1))
    with pytest.raises(NotRun, match="over"):
        read_results(_launch(tmp_path), 1, "cpu", _truth((1,))[0])


def test_a_spec_that_did_not_load_stands_for_every_case_and_a_stop_leaves_the_rest_missing(tmp_path: Path) -> None:
    _write(tmp_path, {"load": {"status": "failed", "message": "the spec did not import: KeyError"}, "results": []}, b"")
    ran = read_results(_launch(tmp_path), 3, "cpu", _truth((1,))[0])
    assert [r.status for r in ran] == ["failed"] * 3
    _write(tmp_path, {"load": {"status": "ok"}, "results": [{"status": "oom", "message": "CUDA out of memory"}]}, b"")
    ran = read_results(_launch(tmp_path), 2, "cpu", _truth((1,))[0])
    assert [r.status for r in ran] == ["oom", "missing"]


def test_the_program_as_written_says_nothing_of_the_gate_but_the_name_the_spec_imports() -> None:
    text = program_text()
    compile(text, "train.py", "exec")
    said = [line for line in text.splitlines() if "gate" in line.lower() or "judge" in line.lower()]
    assert said == ["FACADE = 'gpu_gate'"], said
    assert '"""' not in text and "#" not in text


def test_the_gates_own_files_are_found_to_be_hidden() -> None:
    import gpu_gate

    dirs, files, _tree = gate_files()
    assert Path(gpu_gate.__file__).resolve().parent in dirs
    assert any(d.name.endswith((".dist-info", ".egg-info")) for d in dirs), dirs
