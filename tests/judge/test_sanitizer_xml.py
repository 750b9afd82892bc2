from __future__ import annotations

from pathlib import Path

import pytest

from gpu_gate.judge.checks.sanitizer import findings_from_records, finding_kind
from gpu_gate.cuda import sanitizer as cs
from gpu_gate.findings import Severity

DATA = Path(__file__).parent.parent / "data" / "sanitizer"


def _records(name: str) -> list[cs.Record]:
    return cs.parse_xml((DATA / name).read_text())


def test_real_racecheck_sample_becomes_one_race_finding() -> None:
    [record] = _records("racecheck_real.xml")
    assert (record.record_kind, record.level, record.text) == ("Analysis", "Error", "Race condition")
    assert record.kernel == "smem_race" and record.count == 16384
    [finding] = findings_from_records("racecheck", [record])
    assert (finding.check, finding.kind, finding.severity) == ("racecheck", "race", Severity.ERROR)
    assert finding.message == ("Race condition in smem_race (source: Write at smem_race+0x220; "
                               "destination: Read at smem_race+0x260) [16384 times]")
    assert finding.details["count"] == 16384


ROOT = "/home/ci/project"


def test_real_memcheck_cuda_overrun_merges_repeats_with_repo_relative_location() -> None:
    records = _records("memcheck_cuda_tail_bug_real.xml")
    assert len(records) == 24
    [read] = findings_from_records("memcheck", records, repo_root=ROOT)
    assert (read.kind, read.file, read.line) == ("invalid-global-read", "tests/gpu/kernels/tail.cu", 4)
    assert read.details["count"] == 24 and read.details["size"] == 4 and read.details["kernel"] == "tail_oob"
    assert read.details["thread"] == [232, 0, 0] and read.details["block"] == [3, 0, 0]
    assert read.message == ("Invalid __global__ read of size 4 bytes is out of bounds in tail_oob at "
                            "tests/gpu/kernels/tail.cu:4 [24 times]")


def test_real_memcheck_triton_overrun_points_at_the_python_line() -> None:
    [read] = findings_from_records("memcheck", _records("memcheck_triton_tail_bug_real.xml"), repo_root=ROOT)
    assert (read.kind, read.file, read.line) == ("invalid-global-read", "tests/gpu/kernels/triton_copy.py", 9)
    assert read.details["kernel"] == "copy_nomask"


def test_real_racecheck_with_line_info_names_both_sides() -> None:
    [race] = findings_from_records("racecheck", _records("racecheck_smem_race_real.xml"), repo_root=ROOT)
    assert (race.kind, race.file, race.line) == ("race", "tests/gpu/kernels/smem.cu", 4)
    assert "source: Write at smem_race+0x100 (line 4); destination: Read at smem_race+0x110 (line 5)" in race.message
    assert race.details["count"] == 4096


def test_real_synccheck_without_level_is_still_an_error() -> None:
    [sync] = findings_from_records("synccheck", _records("synccheck_divergent_barrier_real.xml"), repo_root=ROOT)
    assert (sync.kind, sync.severity, sync.line) == ("barrier-divergence", Severity.ERROR, 6)
    assert sync.message.startswith("Barrier error: Divergent thread(s) in warp in divergent_barrier")
    assert sync.details["count"] == 8


def test_real_initcheck_read() -> None:
    [init] = findings_from_records("initcheck", _records("initcheck_uninit_bug_real.xml"), repo_root=ROOT)
    assert (init.kind, init.file, init.line) == ("uninitialized-read", "tests/gpu/kernels/uninit.cu", 4)
    assert init.details["count"] == 100


def test_clean_run_is_an_empty_document() -> None:
    assert _records("memcheck_cuda_tail_ok_real.xml") == []


def test_nearest_allocation_is_derived_when_the_record_has_it() -> None:
    # Synthetic: these fields are not in every release's XML; the real files above lack them.
    xml = """<ComputeSanitizerOutput><record><kind>Precise</kind><level>Error</level>
      <what><text>Invalid __global__ read of size 16 bytes</text><address>0xfa1</address>
      <nearestAddress>0x0</nearestAddress><nearestSize>4000</nearestSize></what></record></ComputeSanitizerOutput>"""
    [record] = cs.parse_xml(xml)
    assert record.allocation == "1 bytes after the nearest allocation at 0x0 of size 4,000 bytes"
    text = xml.replace("<nearestAddress>0x0</nearestAddress>", "").replace(
        "</text>", " 1 bytes after the nearest allocation at 0x7f00 of size 4,000 bytes</text>")
    assert cs.parse_xml(text)[0].allocation == "1 bytes after the nearest allocation at 0x7f00 of size 4,000 bytes"


def test_kinds_of_other_reports() -> None:
    def kind(text: str, record_kind: str = "Precise") -> str:
        return finding_kind(cs.Record(record_kind, "Error", text))

    assert kind("Invalid __shared__ write of size 8 bytes") == "invalid-shared-write"
    assert kind("Misaligned __global__ atomic of size 4 bytes") == "misaligned-global-atomic"
    assert kind("Leaked 4000 bytes at 0x7f00", "Leak") == "leak"
    assert kind("Program hit cudaErrorInvalidValue (error 1) on CUDA API call to cudaMemcpy.", "Api") == "api-error"


@pytest.mark.parametrize("text", ["", "<html/>", "<ComputeSanitizerOutput><record>"])
def test_unreadable_xml_is_an_error_not_an_empty_result(text: str) -> None:
    with pytest.raises(cs.XmlError):
        cs.parse_xml(text)


def test_empty_output_means_no_records() -> None:
    assert cs.parse_xml('<?xml version="1.0"?>\n<ComputeSanitizerOutput>\n</ComputeSanitizerOutput>') == []
