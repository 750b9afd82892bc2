"""The JSON objects that ``--format json`` prints on stdout, for ``check`` and ``list-kernels``
(``plan`` prints the plan itself, gpu_gate.plan.Plan.to_json). Documented in docs/cli.md; a key
is added, never renamed or removed, without raising ``schema``."""
from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ..plan import Plan
    from ..record import RunRecord
    from ..verdict import Item, Verdict

SCHEMA = 1


def check_json(record: RunRecord, verdict: Verdict, reports: dict[str, Path], exit_code: int) -> dict[str, object]:
    return {
        "schema": SCHEMA,
        "command": "check",
        "passed": verdict.passed,
        "exit_code": exit_code,
        "headline": verdict.headline,
        "base": record.base,
        "head": record.head,
        "rules": record.rules,
        "policy_source": record.policy_source,
        "counts": dict(verdict.counts),
        "blocking": [_item(i) for i in verdict.blocking],
        "warnings": [_item(i) for i in verdict.warnings],
        "kernels": [k.to_json() for k in record.kernels],
        "jobs": [{"id": r.job_id, "check": r.check, "status": r.status.value, "level": r.level, "spec": r.spec,
                  "kernels": list(r.kernels), "cases": r.cases, "duration_s": round(r.duration_s, 3),
                  "reason": r.reason, "cached_from": r.cached_from, "findings": [f.to_json() for f in r.findings]}
                 for r in record.results],
        "notes": list(record.notes),
        "reports": {name: str(path) for name, path in reports.items()},
    }


def _item(item: Item) -> dict[str, object]:
    return {"reason": item.reason, "job": item.job.job_id if item.job is not None else None,
            "finding": item.finding.to_json() if item.finding is not None else None}


def list_kernels_json(plan: Plan) -> dict[str, object]:
    predicted = {f.file: f.message for f in plan.findings if f.kind == "uncovered-predicted"}
    return {
        "schema": SCHEMA,
        "command": "list-kernels",
        "base": plan.base,
        "head": plan.head,
        "policy_source": plan.policy_source,
        "kernels": [{**k.to_json(), "covered": None if k.status == "deleted" else bool(k.specs) and k.path not in predicted,
                     "predicted_uncovered": predicted.get(k.path)} for k in plan.kernels],
        "selected": {sid: list(why) for sid, why in sorted(plan.selected.items())},
        "findings": [f.to_json() for f in plan.findings],
        "notes": list(plan.notes),
    }
