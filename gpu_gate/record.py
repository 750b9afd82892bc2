"""The run record: what one ``check`` (or one matrix shard) writes as ``results.json``.

``report`` reads one or more records, merges them and renders the reports. A
record is self-contained: it carries the plan-level findings (uncovered
kernels, files that do not parse) next to the job results, so a report can be
made on a machine that never saw the repository.
"""
from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

from .findings import Finding, JobResult

RECORD_VERSION = 1


@dataclasses.dataclass
class ChangedKernel:
    path: str
    # "cuda" | "triton" | "cute" | "cutile" | "tilelang" | "numba-cuda" | "inline-cuda" | ... (see
    # gpu_gate.kernelscan; several joined by "+"), or "unrecognised": GPU code in no language gpu-gate reads.
    language: str
    status: str  # "added" | "modified" | "renamed" | "deleted" | "affected" (via an include/import)
    via: tuple[str, ...] = ()  # changed files that made this kernel affected
    specs: tuple[str, ...] = ()  # spec ids covering it
    declared: tuple[str, ...] = ()  # of those, the specs that name it (covers=, a .cu path): never revised
    functions: tuple[tuple[str, int], ...] = ()  # (name, line) of the kernels found in a Python file

    def to_json(self) -> dict[str, object]:
        return {"path": self.path, "language": self.language, "status": self.status,
                "via": list(self.via), "specs": list(self.specs), "declared": list(self.declared),
                "functions": [{"name": n, "line": line} for n, line in self.functions]}

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> ChangedKernel:
        functions = tuple((str(f["name"]), int(f["line"])) for f in d.get("functions", ()))
        return cls(d["path"], d["language"], d["status"], tuple(d.get("via", ())), tuple(d.get("specs", ())),
                   tuple(d.get("declared", ())), functions)


@dataclasses.dataclass
class RunRecord:
    base: str | None = None  # resolved merge base sha
    head: str | None = None
    policy_source: str = ""
    kernels: list[ChangedKernel] = dataclasses.field(default_factory=list)
    plan_findings: list[Finding] = dataclasses.field(default_factory=list)  # uncovered, parse errors
    results: list[JobResult] = dataclasses.field(default_factory=list)
    planned_jobs: list[str] = dataclasses.field(default_factory=list)  # ids of every job in the (whole) plan
    shard: str | None = None  # "i/n"
    environment: dict[str, object] = dataclasses.field(default_factory=dict)
    notes: list[str] = dataclasses.field(default_factory=list)  # e.g. "no policy file: default preset"
    selected: dict[str, list[str]] = dataclasses.field(default_factory=dict)  # spec id -> why it ran
    # spec id -> {file: [[first, last], ...]}: the lines the change wrote in the files the spec runs
    changed_lines: dict[str, dict[str, list[list[int]]]] = dataclasses.field(default_factory=dict)
    # job id -> where a finding of that job with no line goes, read from the head's tree when the
    # jobs ran: [{"path", "line", "end", "what"}, ...]. A publisher whose checkout is another
    # commit (workflow_run: the default branch) places findings by these, not by its own files.
    places: dict[str, list[dict[str, object]]] = dataclasses.field(default_factory=dict)
    rules: str | None = None  # the revision whose policy and specs were in force (the base branch's tip)

    def to_json(self) -> dict[str, object]:
        return {
            "version": RECORD_VERSION,
            "base": self.base,
            "head": self.head,
            "rules": self.rules,
            "policy_source": self.policy_source,
            "kernels": [k.to_json() for k in self.kernels],
            "plan_findings": [f.to_json() for f in self.plan_findings],
            "results": [r.to_json() for r in self.results],
            "planned_jobs": list(self.planned_jobs),
            "shard": self.shard,
            "environment": self.environment,
            "notes": list(self.notes),
            "selected": {k: list(v) for k, v in self.selected.items()},
            "changed_lines": self.changed_lines,
            "places": self.places,
        }

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> RunRecord:
        if d.get("version") != RECORD_VERSION:
            raise ValueError(f"unsupported results version {d.get('version')!r} (expected {RECORD_VERSION})")
        return cls(
            base=d.get("base"),
            head=d.get("head"),
            rules=d.get("rules") if isinstance(d.get("rules"), str) else None,
            policy_source=d.get("policy_source", ""),
            kernels=[ChangedKernel.from_json(k) for k in d.get("kernels", [])],
            plan_findings=[Finding.from_json(f) for f in d.get("plan_findings", [])],
            results=[JobResult.from_json(r) for r in d.get("results", [])],
            planned_jobs=list(d.get("planned_jobs", [])),
            shard=d.get("shard"),
            environment=dict(d.get("environment") or {}),
            notes=list(d.get("notes", [])),
            selected={str(k): list(v) for k, v in (d.get("selected") or {}).items()},
            changed_lines=read_changed_lines(d.get("changed_lines")),
            places={str(k): [dict(p) for p in v if isinstance(p, dict)]
                    for k, v in (d.get("places") or {}).items() if isinstance(v, list)},
        )

    def dumps(self) -> str:
        return json.dumps(self.to_json(), indent=1)

    def write(self, path: Path) -> None:
        path.write_text(self.dumps())

    @classmethod
    def read(cls, path: Path) -> RunRecord:
        return cls.from_json(json.loads(path.read_text()))


def merge(records: list[RunRecord]) -> RunRecord:
    """Merge shard records. Plan-level data is taken once; results are concatenated by job id."""
    if not records:
        return RunRecord()
    first = records[0]
    seen: dict[str, JobResult] = {}
    for rec in records:
        for r in rec.results:
            seen[r.job_id] = r
    plan_findings: list[Finding] = []
    pf_seen: set[str] = set()
    for rec in records:
        for f in rec.plan_findings:
            key = json.dumps(f.to_json(), sort_keys=True)
            if key not in pf_seen:
                pf_seen.add(key)
                plan_findings.append(f)
    planned: list[str] = []
    for rec in records:
        for j in rec.planned_jobs:
            if j not in planned:
                planned.append(j)
    return RunRecord(
        base=first.base,
        head=first.head,
        rules=first.rules,
        policy_source=first.policy_source,
        kernels=first.kernels,
        plan_findings=plan_findings,
        results=sorted(seen.values(), key=lambda r: r.job_id),
        planned_jobs=planned,
        shard=None,
        environment=first.environment,
        notes=list(dict.fromkeys(n for rec in records for n in rec.notes)),
        selected={k: v for rec in records for k, v in rec.selected.items()},
        changed_lines={k: v for rec in records for k, v in rec.changed_lines.items()},
        places={k: v for rec in records for k, v in rec.places.items()},
    )


def read_changed_lines(raw: object) -> dict[str, dict[str, list[list[int]]]]:
    """``changed_lines`` from JSON, keeping only well-formed ranges (a report never fails on them)."""
    out: dict[str, dict[str, list[list[int]]]] = {}
    for sid, files in (raw or {}).items() if isinstance(raw, dict) else ():
        if not isinstance(files, dict):
            continue
        out[str(sid)] = {str(f): [[int(a), int(b)] for a, b in ranges
                                  if isinstance(a, int) and isinstance(b, int) and 0 < a <= b]
                         for f, ranges in files.items() if isinstance(ranges, list)
                         and all(isinstance(r, list) and len(r) == 2 for r in ranges)}
    return out
