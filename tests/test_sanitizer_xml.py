from __future__ import annotations

from pathlib import Path

import pytest

from gpu_gate.checks.sanitizer import findings_from_records, finding_kind
from gpu_gate.cuda import sanitizer as cs
from gpu_gate.findings import Severity

DATA = Path(__file__).parent / "data" / "sanitizer"


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


def test_memcheck_repeats_merge_and_keep_location_and_allocation() -> None:
    findings = findings_from_records("memcheck", _records("memcheck_authored.xml"))
    read, write = findings
    assert (read.kind, read.file, read.line) == ("invalid-global-read", "tests/gpu/kernels/tail_oob.cu", 5)
    assert read.details["count"] == 2 and read.details["thread"] == [8, 0, 0] and read.details["block"] == [3, 0, 0]
    assert read.details["size"] == 4
    assert read.details["allocation"] == "0 bytes after the nearest allocation at 0x7f1a2c000000 of size 4,000 bytes"
    assert read.message.startswith("Invalid __global__ read of size 4 bytes in tail_oob at tests/gpu/kernels/tail_oob.cu:5")
    assert read.message.endswith("[2 times]")
    assert (write.kind, write.file, write.line) == ("invalid-global-write", "tests/gpu/kernels/copy.py", 12)
    assert write.details["allocation"] == "1 bytes after the nearest allocation at 0x7f1a2c100000 of size 4,000 bytes"


def test_synccheck_and_initcheck_kinds() -> None:
    [sync] = findings_from_records("synccheck", _records("synccheck_authored.xml"))
    assert (sync.kind, sync.line, sync.details["kernel"]) == ("barrier-divergence", 6, "divergent_barrier")
    [init] = findings_from_records("initcheck", _records("initcheck_authored.xml"))
    assert (init.kind, init.file, init.details["kernel"]) == ("uninitialized-read", None, "_Z4multPiS_i")


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
