"""A job result's extra facts are typed fields, and ``results.json`` reads as it always did: a
record written before the fields had types loads into them, and one written back is the same
JSON."""
from __future__ import annotations

import json

from gpu_gate.findings import JobResult, Status
from gpu_gate.job_extra import JobExtra

# the ``extra`` of an equivalence result as results.json held it before its fields were typed
OLD = {"seed": 7, "rule": "error <= 2 x torch's error in the kernel's dtype + dtype floor",
       "coverage": {"cases": 6, "dims": {}, "inputs": {}}, "replayed": ["c0003", "c0000"],
       "growth": {"curves": []}, "specializations": [{"file": "k.py", "count": 1}], "launch_resources": [],
       "timing": {"cases_s": 1.5, "outside": {"start_s": 0.2}}, "launches": {"kernels": [], "files": ["k.py"]},
       "resources": [{"kernel": "k", "registers": 32}], "linted": ["k"]}


def _result(extra: object) -> dict[str, object]:
    return {"job_id": "j", "check": "equivalence", "status": "passed", "extra": extra}


def test_an_old_record_loads_into_the_typed_fields_and_writes_back_the_same() -> None:
    r = JobResult.from_json(_result(OLD))
    assert r.extra.seed == 7 and r.extra.replayed == ["c0003", "c0000"] and r.extra.linted == ["k"]
    assert r.extra.timing == {"cases_s": 1.5, "outside": {"start_s": 0.2}}
    assert r.extra.launches == {"kernels": [], "files": ["k.py"]} and r.extra.other == {}
    assert json.loads(json.dumps(r.to_json()))["extra"] == OLD


def test_a_key_this_version_does_not_know_is_kept() -> None:
    r = JobResult.from_json(_result({"seed": 1, "flops": 3.5, "seed_of_base": "x"}))
    assert r.extra.seed == 1 and r.extra.other == {"flops": 3.5, "seed_of_base": "x"}
    assert r.to_json()["extra"] == {"seed": 1, "flops": 3.5, "seed_of_base": "x"}


def test_a_field_of_another_type_is_kept_as_it_came_not_read_as_the_field() -> None:
    r = JobResult.from_json(_result({"seed": "7", "resources": {"not": "rows"}, "replayed": True}))
    assert r.extra.seed is None and r.extra.resources is None and r.extra.replayed is None
    assert r.to_json()["extra"] == {"seed": "7", "resources": {"not": "rows"}, "replayed": True}


def test_no_extra_and_an_empty_one_read_the_same() -> None:
    for raw in (None, {}, [], "x"):
        assert JobResult.from_json(_result(raw)).extra == JobExtra()
    assert JobResult("j", "compile", Status.PASSED).to_json()["extra"] == {}


def test_an_empty_list_set_by_a_check_is_written() -> None:
    """The compile check writes ``linted: []`` where it read nothing: not the same as not saying."""
    assert JobExtra(linted=[], resources=[]).to_json() == {"resources": [], "linted": []}
