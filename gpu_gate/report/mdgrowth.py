"""The Markdown report's error-growth curves (a table and a chart of the error against the size)
and compile resources (registers, spills, local and shared memory per kernel)."""
from __future__ import annotations

import math
import re
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from ..findings import JobResult
from ..verdict import Verdict
from . import blocking_findings, job_target, warning_findings
from .mdtext import code, details, escape

LOG10_FLOOR = -20.0  # stands in for an error of exactly 0 on the log chart


GROWTH_KINDS = frozenset({"error-growth"})  # findings an error-growth curve explains


def growth_blocks(results: Iterable[JobResult], verdict: Verdict) -> list[str]:
    """A job's curve only next to a growth finding it explains: shown alone, a curve where the
    kernel beats torch would sit beside a red verdict it has nothing to do with."""
    shown = blocking_findings(verdict) | warning_findings(verdict)
    return [details(f"error against size: {r.check} {job_target(r)}", growth_block(r, r.extra.growth),
                    open_=True)
            for r in results if r.extra.growth is not None
            and any(f.kind in GROWTH_KINDS and id(f) in shown for f in r.findings)]


def growth_block(r: JobResult, g: dict[str, Any]) -> str:
    dim, dtype = str(g.get("dim", "size")), str(g.get("dtype", ""))
    rows = [row for row in g.get("rows", []) if isinstance(row, dict)]
    head = f"#### {escape(r.check)} · {code(job_target(r))} · error vs {code(dim)}" + (f" ({escape(dtype)})" if dtype else "")
    table = [f"| {escape(dim)} | candidate error | baseline error | ratio |", "| ---: | ---: | ---: | ---: |"]
    for row in rows:
        cand, base = _num(row.get("candidate")), _num(row.get("baseline"))
        ratio = f"{cand / base:.3g}×" if cand is not None and base else "—"
        table.append(f"| {row.get('size')} | {_fmt(cand)} | {_fmt(base)} | {ratio} |")
    parts = [head, "\n".join(table), _slope_line(g)]
    if rows:
        parts.append(_xychart(dim, dtype, rows))
    return "\n\n".join(p for p in parts if p)


def _slope_line(g: Mapping[str, object]) -> str:
    sc, sb = _num(g.get("slope_candidate")), _num(g.get("slope_baseline"))
    if sc is None or sb is None:
        return ""
    text = f"Slope of log₁₀ error against log₁₀ size: candidate {sc:.2f}, baseline {sb:.2f}."
    if g.get("flagged"):
        text += " ⚠️ **The candidate's error grows faster with size than the baseline's.**"
    return text


def _xychart(dim: str, dtype: str, rows: Sequence[Mapping[str, object]]) -> str:
    cand = [_log10(row.get("candidate")) for row in rows]
    base = [_log10(row.get("baseline")) for row in rows]
    low, high = math.floor(min(cand + base)), math.ceil(max(cand + base))
    if low == high:
        high += 1
    label = re.sub(r'["\n]', "", f"log10(error) vs {dim} {dtype}: line 1 candidate, line 2 baseline")
    sizes = ", ".join(re.sub(r"[^0-9A-Za-z_.-]", "", str(row.get("size"))) or "?" for row in rows)
    return "\n".join([
        "```mermaid", "xychart-beta", f'    title "{label}"',
        f'    x-axis "{re.sub(r"[^0-9A-Za-z_ -]", "", dim)}" [{sizes}]',
        f'    y-axis "log10(error)" {low} --> {high}',
        f"    line [{', '.join(f'{v:.3f}' for v in cand)}]",
        f"    line [{', '.join(f'{v:.3f}' for v in base)}]", "```",
    ])


def resource_blocks(results: Iterable[JobResult]) -> list[str]:
    return [details(f"registers, spills, local and shared memory: {job_target(r)}",
                    _resource_block(r, r.extra.resources))
            for r in results if r.extra.resources]


def _resource_block(r: JobResult, resources: Iterable[object]) -> str:
    rows = [f"#### {escape(r.check)} · {code(job_target(r))}", "",
            "| Kernel | Arch | Registers | Spill stores | Spill loads | Local bytes | Shared bytes |",
            "| --- | --- | ---: | ---: | ---: | ---: | ---: |"]
    for res in (x for x in resources if isinstance(x, dict)):
        spills = (res.get("spill_store") or 0) + (res.get("spill_load") or 0)
        warn = " ⚠️" if spills else ""
        rows.append(f"| {code(str(res.get('kernel', '?')))}{warn} | {escape(str(res.get('arch', '')))} | "
                    + " | ".join(str(res.get(k, "")) for k in
                                 ("registers", "spill_store", "spill_load", "local_bytes", "shared_bytes"))
                    + " |")
    return "\n".join(rows)


def _num(value: object) -> float | None:
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def _fmt(value: float | None) -> str:
    return "—" if value is None else f"{value:.3g}"


def _log10(value: object) -> float:
    v = _num(value)
    return math.log10(v) if v is not None and v > 0 else LOG10_FLOOR
