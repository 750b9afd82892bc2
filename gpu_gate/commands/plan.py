"""``gpu-gate plan``: the jobs the gate would run, as JSON (with ``--shards``, a GitHub Actions matrix
too). No torch, no GPU."""
from __future__ import annotations

import json
from pathlib import Path

from . import output as out
from ..exitcodes import ExitCode
from .planning import make_plan
from .request import PlanRequest


def run(request: PlanRequest, *, shard: str | None = None, shards: int | None = None,
        output: Path | None = None) -> int:
    from ..plan import parse_shard, shard as shard_of

    plan = make_plan(request).plan
    if shard:
        i, n = parse_shard(shard)
        plan.jobs = shard_of(plan.jobs, i, n)
    text = json.dumps(plan.to_json(shards=shards), indent=1)
    for sid, why in sorted(plan.selected.items()):
        out.detail(f"spec {sid}: {'; '.join(why)}")
    out.detail(f"{len(plan.jobs)} jobs: " + ", ".join(j.id for j in plan.jobs))
    if output:
        output.parent.mkdir(parents=True, exist_ok=True)
        output.write_text(text)
        out.verdict(f"plan: {len(plan.jobs)} jobs written to {output}")
    else:
        out.data(text)
    return ExitCode.PASSED
