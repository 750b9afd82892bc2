from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from lxml import etree

from gpu_gate.errors import GateError
from gpu_gate.record import RunRecord
from gpu_gate.report.formats import FILENAMES, OutputFormat, write_reports
from test_report_fixtures import build


def test_every_format_is_written_where_the_ci_expects_it(tmp_path: Path) -> None:
    record, verdict = build(tmp_path)
    out = tmp_path / "out" / "gpu-gate"
    paths = write_reports(record, verdict, out, list(OutputFormat))
    assert {k: p.name for k, p in paths.items()} == {
        "junit": "junit.xml", "markdown": "report.md", "sarif": "report.sarif", "json": "results.json"}
    assert etree.parse(str(paths["junit"])).getroot().tag == "testsuites"
    assert paths["markdown"].read_text(encoding="utf-8").startswith("## ❌ gpu-gate: FAILED")
    assert json.loads(paths["sarif"].read_text())["version"] == "2.1.0"
    assert RunRecord.read(paths["json"]).to_json() == record.to_json()


def test_formats_can_be_named_by_string_and_only_those_are_written(tmp_path: Path) -> None:
    record, verdict = build(tmp_path)
    paths = write_reports(record, verdict, tmp_path / "r", ["markdown", "markdown"])
    assert list(paths) == ["markdown"] and sorted(p.name for p in (tmp_path / "r").iterdir()) == ["report.md"]
    with pytest.raises(ValueError):
        write_reports(record, verdict, tmp_path / "r", ["html"])


def test_unwritable_report_is_named_after_the_others_are_written(tmp_path: Path) -> None:
    record, verdict = build(tmp_path)
    out = tmp_path / "out"
    (out / "junit.xml").mkdir(parents=True)  # something in the way, as a full disk would be
    with pytest.raises(GateError) as err:
        write_reports(record, verdict, out, list(OutputFormat))
    message = str(err.value)
    assert message.startswith(f"cannot write report {out / 'junit.xml'}: Is a directory")
    assert "\n" not in message
    assert all((out / name).is_file() for name in ("report.md", "report.sarif", "results.json"))


def test_every_format_has_a_distinct_file_name() -> None:
    assert set(FILENAMES) == set(OutputFormat)
    assert len(set(FILENAMES.values())) == len(OutputFormat)


def test_reporting_does_not_import_torch(tmp_path: Path) -> None:
    code = ("import sys, gpu_gate.report.formats, gpu_gate.report.console; "
            "print(sorted(m for m in ('torch', 'cupy', 'triton') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=tmp_path)
    assert out.stdout.strip() == "[]"
