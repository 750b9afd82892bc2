"""The compile check of the Triton specializations a spec's cases actually launched: the judge's half.

Real Triton kernels choose their constexprs at the call site, so the compile job, which reads kernel
files without running them, often knows no values for them ("not compiled: no values known"). The
equivalence job knows: on a GPU its candidate worker records every launch and, after the cases,
compiles each distinct launched specialization of the spec's kernel files for the compile check's
``archs`` (passed in the equivalence job's ``options["compile"]``; see
:mod:`gpu_gate.worker.specializations`). The worker answers with facts: each compiled kernel's
registers, spills and memory, and each compiler error's text. This module decides what they mean,
in the judge: a compile error at the compile check's level, resources against its limits. The
worker's answer is data from the candidate's process, so it is read field by field, and anything
malformed is said so instead of trusted or dropped.
"""
from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

from ..compiled import ptxlint
from ...cuda.nvcc import KernelResources
from ...findings import Finding, Severity
from . import compiled_base, compiled_offsets, compiled_races
from .compile import resource_findings_for
from .compile_facts import CHECK

ROW_INTS = ("registers", "spill_store", "spill_load", "local_bytes", "shared_bytes", "constant_bytes", "barriers")
WHERE = ("file", "kernel", "arch")


def judge(compiled: object, options: dict[str, object] | None,
          read: set[str] | None = None) -> tuple[list[Finding], list[dict[str, object]]]:
    """Findings and resource rows (for the report) from the worker's ``compile`` answer; ``options``:
    the compile check's settings; ``read``, where given, gets the kernels whose PTX was read (the
    PTX is parsed once)."""
    options = options or {}
    severity = Severity.ERROR if options.get("level", "required") == "required" else Severity.WARNING
    if not isinstance(compiled, dict):
        what = "no answer, though the cases launched specializations" if compiled is None else "not an object"
        return [_malformed(what, severity)], []
    findings: list[Finding] = []
    resources: list[KernelResources] = []
    rows: list[dict[str, object]] = []
    for raw in _list(compiled.get("errors")):
        where = _where(raw)
        if where is None or not isinstance(raw.get("error"), str):
            findings.append(_malformed(f"an error entry is malformed: {str(raw)[:200]}", severity))
            continue
        findings.append(_error(where, raw, severity))
    for raw in _list(compiled.get("rows")):
        where = _where(raw)
        values = {k: raw.get(k, 0) for k in ROW_INTS}
        if where is None or not all(type(v) is int and v >= 0 for v in values.values()):
            findings.append(_malformed(f"a resource row is malformed: {str(raw)[:200]}", severity))
            continue
        symbol = raw["symbol"] if isinstance(raw.get("symbol"), str) else where["kernel"]
        resources.append(KernelResources(where["kernel"], symbol, where["arch"], **values))
        rows.append({**where, "constexprs": _dict(raw.get("constexprs")), "signature": _dict(raw.get("signature")),
                     "launches": raw.get("launches") if type(raw.get("launches")) is int else 0,
                     **{k: values[k] for k in ("registers", "spill_store", "spill_load", "local_bytes",
                                               "shared_bytes")}})
    lint, was_read = offsets(compiled)
    findings += lint
    if read is not None:
        read.update(was_read)
    unread = compiled.get("ptx_left_out", 0)
    if type(unread) is int and unread > 0:
        findings.append(Finding(CHECK, "launches-not-read", f"the PTX of {unread} launched Triton specializations was "
                                f"not read for 32-bit offsets and races (more than the judge takes from one job)",
                                Severity.NOTE))
    why = compiled.get("why")
    if isinstance(why, str) and why:
        findings.append(Finding(CHECK, "launches-not-compiled", f"the launched Triton specializations were not "
                                f"compiled: {why[:500]}", Severity.NOTE))
    skipped = compiled.get("not_compiled", 0)
    if type(skipped) is int and skipped > 0:
        findings.append(Finding(CHECK, "launches-not-compiled", f"{skipped} more launched Triton specializations "
                                f"were not compiled (at most a fixed number per job)", Severity.NOTE))
    return findings + resource_findings_for(options, resources), rows


def offsets(compiled: object) -> tuple[list[Finding], set[str]]:
    """What the PTX of the launched specializations shows (the worker sends it as text; the reading
    is the judge's): 32-bit offsets (:mod:`gpu_gate.judge.compiled.ptx_offsets`; by absolute rules
    each a warning, as in the compile check, see :mod:`.compiled_offsets`), and races through global
    memory (:mod:`gpu_gate.judge.compiled.ptxlint`: a lock or flag released without a barrier, an
    error; a scatter without atomics, a note), as the compile check reads its own builds: real
    Triton kernels take their constexprs at the call site, and the compile check, reading the file
    alone, cannot build them ("no values known"). One finding per kernel, kind and source line
    however many specializations share it; and the kernels whose PTX was read."""
    if not isinstance(compiled, dict):
        return [], set()
    root = compiled.get("root") if isinstance(compiled.get("root"), str) else ""
    seen: dict[tuple[str, str | None, int | None, str], Finding] = {}
    read: set[str] = set()
    for raw in _list(compiled.get("ptx")):
        where, text = _where(raw), raw.get("ptx")
        if where is None or not isinstance(text, str):
            continue
        read.update(k for k in ptxlint.parse(text)[1] if isinstance(k, str))
        values = ", ".join(f"{k}={v}" for k, v in _dict(raw.get("constexprs")).items())
        found = compiled_offsets.findings_from_ptx(text, where["file"], Path(root or "."), where["arch"])
        found += compiled_races.findings_from_ptx(text, where["file"], Path(root or "."), where["arch"])
        for f in found:
            key = (f.kind, f.file, f.line, str(f.details.get("kernel")))
            if key not in seen:
                seen[key] = dataclasses.replace(f, message=f"{f.message} (read from the PTX of {where['kernel']} as the "
                                                           f"cases launched it: {values})",
                                                details={**f.details, "constexprs": _dict(raw.get("constexprs"))})
    return list(seen.values()), read


def against_base(findings: list[Finding], base_compiled: object, commit: str,
                 read_at_head: set[str] | None = None) -> list[Finding]:
    """In a pull request: each launched specialization that does not compile at head, looked up in
    what the base's worker compiled of its own launches (the same kernel file, kernel, constexprs
    and arch). It fails there too: pre-existing, the repository's debt (the policy's
    ``preexisting`` rule decides); it compiles there: new; the base's cases never launched it: no
    base, the absolute rule stands. A note says how many of each. ``base_compiled``: the base
    worker's ``compile`` answer, read field by field like the head's (it is code under test too)."""
    errors = [f for f in findings if f.kind == "compile-error" and isinstance(f.details.get("kernel"), str)]
    linted = [f for f in findings if f.kind in compiled_base.LINT_KINDS]
    if not errors and not linted:
        return findings
    short = commit[:12]
    if not isinstance(base_compiled, dict):
        return findings + [_note(f"the launched specializations were not compared with the base's code ({short}): "
                                 f"its worker gave no readable answer; what they show is judged as it is")]
    base_offsets, read_at_base = offsets(base_compiled)
    findings, fixed, unread = compiled_base.compare(findings, base_offsets, read_at_base, read_at_head)
    findings += fixed
    if linted:
        new, old = compiled_base.tally([f for f in findings if f.kind in compiled_base.LINT_KINDS])
        alone = f"; not compared, the base's cases never launched {', '.join(unread)}" if unread else ""
        findings.append(_note(f"compared the PTX of the launched specializations with the base's ({short}): {new} new, "
                              f"{old} pre-existing and {len(fixed)} fixed finding(s) read from it (32-bit offsets, "
                              f"races){alone}"))
    if not errors:
        return findings
    failing, built = set(), set()
    for raw in _list(base_compiled.get("errors")):
        if _where(raw) is not None:
            failing.add(_spec_key(raw.get("file"), raw.get("kernel"), raw.get("arch"), raw.get("constexprs")))
    for raw in _list(base_compiled.get("rows")):
        if _where(raw) is not None:
            built.add(_spec_key(raw.get("file"), raw.get("kernel"), raw.get("arch"), raw.get("constexprs")))
    out, counts = [], {"new": 0, "pre-existing": 0, "no base": 0}
    for f in findings:
        if f not in errors:
            out.append(f)
            continue
        key = _spec_key(f.file, f.details["kernel"], f.details.get("arch"), f.details.get("constexprs"))
        if key in failing:
            change, prefix = "pre-existing", "pre-existing (the base's code, launched the same way, does not compile either): "
        elif key in built:
            change, prefix = "new", "new in this change (the base's code compiles as launched the same way): "
        else:
            counts["no base"] += 1
            out.append(f)
            continue
        counts[change] += 1
        out.append(dataclasses.replace(f, message=prefix + f.message, details={**f.details, "change": change}))
    unmatched = f"; {counts['no base']} the base's cases never launched (judged as they are)" if counts["no base"] else ""
    return out + [_note(f"compared the launched specializations that do not compile with the base's code ({short}): "
                        f"{counts['new']} new, {counts['pre-existing']} pre-existing{unmatched}")]


def _spec_key(file: object, kernel: object, arch: object, constexprs: object) -> tuple[str, str, str, str]:
    values = json.dumps(constexprs if isinstance(constexprs, dict) else {}, sort_keys=True, default=str)
    return str(file), str(kernel), str(arch), values


def _note(message: str) -> Finding:
    return Finding(CHECK, "differential", message, Severity.NOTE)


def _list(value: object) -> list[dict[str, Any]]:
    return [v for v in value if isinstance(v, dict)] if isinstance(value, list) else []


def _dict(value: object) -> dict[str, object]:
    return dict(value) if isinstance(value, dict) else {}


def _where(raw: dict[str, object]) -> dict[str, str] | None:
    where = {k: raw.get(k) for k in WHERE}
    return where if all(isinstance(v, str) and v for v in where.values()) else None  # type: ignore[return-value]


def _error(where: dict[str, str], raw: dict[str, Any], severity: Severity) -> Finding:
    text = raw["error"].strip().splitlines()
    first = next((t.strip() for t in reversed(text) if t.strip()), "compile error")
    constexprs = _dict(raw.get("constexprs"))
    values = ", ".join(f"{k}={v}" for k, v in constexprs.items())
    return Finding(CHECK, "compile-error", f"{where['file']}: Triton kernel {where['kernel']}, as the cases launched "
                   f"it ({values}), does not compile for {where['arch']}: {first}", severity, file=where["file"],
                   details={"kernel": where["kernel"], "arch": where["arch"], "constexprs": constexprs,
                            "signature": _dict(raw.get("signature")), "error": "\n".join(text[:40])})


def _malformed(what: str, severity: Severity) -> Finding:
    return Finding(CHECK, "launches-unreadable", f"the candidate's worker answered the compile of the launched "
                   f"specializations with data gpu-gate cannot read ({what}): they count as not compiled", severity)
