"""``gpu-gate list-kernels``: the changed kernels (directly or through an include or import), what
each depends on, and which specs cover it."""
from __future__ import annotations

import json
from typing import TYPE_CHECKING

from . import output as out
from ..exitcodes import ExitCode
from .planning import make_plan, say_head
from .request import PlanRequest

if TYPE_CHECKING:
    from ..plan import Plan


def run(request: PlanRequest, *, json_format: bool = False) -> int:
    from .json_output import list_kernels_json

    planned = make_plan(request)
    plan = planned.plan
    out.say(planned.loaded.banner)
    say_head(plan, request.staged)
    if json_format:
        out.data(json.dumps(list_kernels_json(plan), indent=1))
    if plan.kernels or plan.selected or plan.findings:
        _list_kernels(plan)
    out.verdict(_kernels_summary(plan))
    return ExitCode.PASSED


def _list_kernels(plan: Plan) -> None:
    from ..report.console import paint

    c = out.colour()
    if not plan.kernels:
        out.say("no kernel file changed" + (": the specs below run for other changes" if plan.selected else ""))
    predicted = {f.file: f for f in plan.findings if f.kind == "uncovered-predicted"}
    for k in plan.kernels:
        via = f" (via {', '.join(k.via)})" if k.via else ""
        out.say(f"{k.path}  [{k.language}, {k.status}{via}]")
        for s in k.specs:
            out.say(f"    covered by {s}" + (" (names it)" if s in k.declared else ""))
        if k.path in predicted:
            out.say(f"    {paint('PREDICTED UNCOVERED', 'red', c)}: {predicted[k.path].message.split(': ', 1)[1]}")
        elif not k.specs and k.status != "deleted":
            out.say(f"    {paint('NOT COVERED', 'red', c)} by any gate spec")
        for name, line in k.functions if out.verbose() else ():
            out.detail(f"    kernel {name} at line {line}")
    if plan.selected:
        out.say("specs that run, and why:")
        for sid, why in sorted(plan.selected.items()):
            out.say(f"  {sid}: {'; '.join(why)}")
    for f in plan.findings:
        if f.kind not in ("uncovered", "uncovered-predicted"):
            out.say(f"{f.location or ''}: {f.message}")
    for note in plan.notes if out.verbose() else ():
        out.detail(f"note: {note}")


def _kernels_summary(plan: Plan) -> str:
    """The last line of list-kernels, shown with -q too."""
    if not plan.kernels and not plan.selected and not plan.findings:
        return "no kernel changes"
    lonely = sum(1 for k in plan.kernels if k.status != "deleted" and (not k.specs or any(
        f.kind == "uncovered-predicted" and f.file == k.path for f in plan.findings)))
    return (f"{len(plan.kernels)} changed kernel file(s), {lonely} not covered by any gate spec; "
            f"{len(plan.selected)} spec(s) run")
