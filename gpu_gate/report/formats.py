"""Output formats and the one function that writes them all into a directory."""
from __future__ import annotations

import enum
import json
from collections.abc import Iterable
from pathlib import Path
from typing import assert_never

from ..errors import GateError
from ..record import RunRecord
from ..verdict import Verdict
from .junit import render_junit
from . import outdir
from .markdown import render_markdown
from .sarif import render_sarif


class OutputFormat(str, enum.Enum):
    JUNIT = "junit"
    MARKDOWN = "markdown"
    SARIF = "sarif"
    JSON = "json"

    @property
    def filename(self) -> str:
        return FILENAMES[self]


FILENAMES = {
    OutputFormat.JUNIT: "junit.xml",
    OutputFormat.MARKDOWN: "report.md",
    OutputFormat.SARIF: "report.sarif",
    OutputFormat.JSON: "results.json",
}


def write_reports(record: RunRecord, verdict: Verdict, out_dir: Path,
                  formats: Iterable[OutputFormat | str], root: Path | None = None,
                  warnings: list[str] | None = None, *, sarif_notes: bool = False) -> dict[str, Path]:
    """Write each format to ``out_dir``; returns {format name: path}. ``root`` is the checkout that
    places findings with no line (default: the working directory); ``out_dir`` is refused where its
    path from ``root`` holds a symbolic link (see :mod:`.outdir`): the reports then go to a directory
    of the gate's own, and ``warnings`` gets a line saying where. ``sarif_notes``: the policy's
    ``reports.sarif_notes``.

    A report that cannot be written (disk full, a directory in the way) does not stop the
    others: they are written first, then a GateError names the first path that failed.
    """
    written: dict[str, Path] = {}
    failed: list[tuple[Path, OSError]] = []
    try:
        out_dir = outdir.prepare(out_dir, root)
    except outdir.UnsafeDirectory as err:
        refused = out_dir
        out_dir = outdir.fallback()
        if warnings is not None:
            warnings.append(f"refused the report directory {refused} ({err}): a link there could make gpu-gate "
                            f"overwrite a file elsewhere; the reports are in {out_dir}")
    except OSError as err:
        raise GateError(f"cannot create the report directory {out_dir}: {err.strerror or err}",
                        hint="choose another --out directory") from err
    for fmt in dict.fromkeys(OutputFormat(f) for f in formats):
        path = out_dir / fmt.filename
        try:
            _write(fmt, record, verdict, path, root, sarif_notes)
        except OSError as err:
            failed.append((path, err))
        else:
            written[fmt.value] = path
    if failed:
        first_path, first_err = failed[0]
        more = f" (and {len(failed) - 1} more)" if len(failed) > 1 else ""
        raise GateError(f"cannot write report {first_path}: {first_err.strerror or first_err}{more}",
                        hint="check free disk space and that the directory is writable")
    return written


def _write(fmt: OutputFormat, record: RunRecord, verdict: Verdict, path: Path, root: Path | None,
           sarif_notes: bool) -> None:
    if fmt is OutputFormat.JUNIT:
        text = render_junit(record, verdict)
    elif fmt is OutputFormat.MARKDOWN:
        text = render_markdown(record, verdict)
    elif fmt is OutputFormat.SARIF:
        text = json.dumps(render_sarif(record, verdict, root, notes=sarif_notes), indent=1)
    elif fmt is OutputFormat.JSON:
        text = record.dumps()
    else:
        assert_never(fmt)
    outdir.write_text(path, text)
