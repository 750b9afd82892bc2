"""The local loop (issue 42): a local run stops an equivalence job at its first confirmed new
failure and, on the CPU, caps the cases' time budget; in CI every case runs on the policy's budget.

On a real repository with the policy `gpu-gate init` writes and a spec filled in as a user would."""
from __future__ import annotations

import json

from conftest_git import GitRepo
from test_init import TRITON
from test_local_not_run import _gate, changed

from gpu_gate.local_loop import adapt, stops_at_red
from gpu_gate.protocol.jobs import Job, SpecRef


def _wrong_change(make_repo) -> GitRepo:  # type: ignore[no-untyped-def]
    # wrong on every element: the first case already shows it, whatever the seed draws
    return changed(make_repo, TRITON.replace("* 2.0,", "* 2.0 + 0.5,"))


def _equivalence(r: GitRepo) -> dict:  # type: ignore[type-arg]
    results = json.loads((r.path / ".gpu-gate" / "out" / "results.json").read_text())
    return next(x for x in results["results"] if x["check"] == "equivalence")


def test_a_local_run_stops_at_the_first_confirmed_failure_and_ci_runs_every_case(make_repo) -> None:  # type: ignore[no-untyped-def]
    r = _wrong_change(make_repo)
    local = _gate("check", "--base", "main", "--cpu", "--no-cache", cwd=r.path, ci=False)
    assert local.returncode == 1, local.stdout + local.stderr
    eq = _equivalence(r)
    assert eq["status"] == "failed"
    stopped = [f for f in eq["findings"] if f["kind"] == "stopped-at-red"]
    assert stopped and stopped[0]["severity"] == "note", eq["findings"]
    assert eq["cases"] == 1 < eq["extra"]["cases_planned"], (eq["cases"], eq["extra"]["cases_planned"])
    mismatch = [f for f in eq["findings"] if f["kind"] == "mismatch" and f["severity"] == "error"]
    assert mismatch and mismatch[0]["details"]["change"] == "new" and mismatch[0]["repro"], eq["findings"]
    assert "stops at its first confirmed new failure" in local.stdout + local.stderr

    for how in ({"ci": True, "args": ()}, {"ci": False, "args": ("--full",)}):  # in CI; locally with --full
        p = _gate("check", "--base", "main", "--cpu", "--no-cache", *how["args"], cwd=r.path, ci=how["ci"])
        assert p.returncode == 1, p.stdout + p.stderr
        eq = _equivalence(r)
        assert not [f for f in eq["findings"] if f["kind"] == "stopped-at-red"], (how, eq["findings"])
        assert eq["cases"] == eq["extra"]["cases_planned"] > 1, how
        assert "stops at its first confirmed new failure" not in p.stdout + p.stderr, how


def _job(**options: object) -> Job:
    return Job(id="equivalence:gate/a_gate.py::a", check="equivalence", level="required", kernels=(),
               spec=SpecRef("gate/a_gate.py", "a"), options={"time_budget_s": 300.0, "candidate_budget_s": None,
                                                             "local_time_budget_s": 90.0, "stop_at_red": "local",
                                                             **options})


def test_the_budget_is_capped_only_on_the_cpu_outside_ci() -> None:
    (job,), notes = adapt([_job()], gpu=False, ci=False)
    assert (job.options["time_budget_s"], job.options["candidate_budget_s"]) == (90.0, 90.0)
    assert job.options["stop_at_red"] is True and len(notes) == 2
    for gpu, ci in ((True, False), (False, True), (True, True)):
        (job,), _ = adapt([_job()], gpu=gpu, ci=ci)
        assert (job.options["time_budget_s"], job.options["candidate_budget_s"]) == (300.0, None), (gpu, ci)
        assert job.options["stop_at_red"] is (not ci)
    # null: as everywhere; a budget already under the cap is kept
    (job,), notes = adapt([_job(local_time_budget_s=None)], gpu=False, ci=False)
    assert job.options["time_budget_s"] == 300.0 and not any("CPU" in n for n in notes)
    (job,), _ = adapt([_job(time_budget_s=30.0, candidate_budget_s=200.0)], gpu=False, ci=False)
    assert (job.options["time_budget_s"], job.options["candidate_budget_s"]) == (30.0, 90.0)
    # a check without these settings is left as it is
    other = Job(id="determinism:x", check="determinism", level="required", kernels=(), options={"repeats": 8})
    assert adapt([other], gpu=False, ci=False)[0] == [other]


def test_stop_at_red_resolves_for_the_run() -> None:
    assert [stops_at_red(v, ci) for v in ("local", "always", "never") for ci in (False, True)] == \
        [True, False, True, True, False, False]
