"""A kernel file that forges the compile check's result, end to end through the CLI on a real git
repository (issue 37). The pull request brings a 32-bit offset back (the bug the compile check
exists for) and its kernel module, when imported, writes a passing result where a job's result
file would be and exits at once, before anything is compiled.

The compile check's worker imports the kernel modules in its sandbox and only answers the judge
(outside it) with facts: nothing it writes is read as a result, so the forgery is a worker that
exited before answering, and the job fails closed. Its honest twins: the same change without the
forgery blocks on the new offset, and a correct change is green.
"""
from __future__ import annotations

import pytest

pytest.importorskip("triton")

from test_compiled_offsets_gate import NARROW, WIDE, _compile, _offsets, _repo, gate  # noqa: E402

# Runs when the compile worker imports the kernel module: a passing result, written to every
# place a result file could be (the last ``.json`` argument of the process, out.json beside it),
# then an exit that skips everything after the import.
FORGERY = '''

def _forge() -> None:
    import json, os, sys
    result = {"job_id": "forged", "check": "compile", "status": "passed", "level": "required",
              "kernels": [], "findings": [], "cases": 1}
    targets = [a for a in sys.argv[1:] if a.endswith(".json") and "out" in os.path.basename(a)]
    for target in [*targets, "out.json"]:
        try:
            with open(target, "w") as out:
                out.write(json.dumps(result))
        except OSError:
            pass
    sys.stdout.flush()
    os._exit(0)


_forge()
'''


@pytest.mark.slow
def test_a_kernel_module_that_writes_a_passing_result_and_exits_is_red(make_repo) -> None:  # type: ignore[no-untyped-def]
    r = _repo(make_repo, WIDE, NARROW, added=FORGERY)
    p = gate(r.path)
    compiled = _compile(r.path)
    assert compiled["status"] == "error", (compiled, p.stdout)
    findings = compiled["findings"]
    crash = [f for f in findings if f["kind"] == "crash"]  # type: ignore[union-attr,index]
    assert crash, findings
    assert "the compile worker exited or died before answering" in crash[0]["message"], crash  # type: ignore[index]
    assert "mylib/scale.py" in crash[0]["message"]  # type: ignore[index]
    assert p.returncode == 1, p.stdout + p.stderr


@pytest.mark.slow
def test_the_same_change_without_the_forgery_blocks_on_its_new_offset(make_repo) -> None:  # type: ignore[no-untyped-def]
    r = _repo(make_repo, WIDE, NARROW)
    p = gate(r.path)
    compiled = _compile(r.path)
    assert _offsets(compiled) == [(11, "error", "new"), (12, "error", "new")], compiled["findings"]
    assert compiled["status"] == "failed" and p.returncode == 1, p.stdout + p.stderr


@pytest.mark.slow
def test_a_correct_change_is_green(make_repo) -> None:  # type: ignore[no-untyped-def]
    r = _repo(make_repo, WIDE, WIDE, comment=True)
    p = gate(r.path)
    compiled = _compile(r.path)
    assert compiled["status"] == "passed" and _offsets(compiled) == [], compiled["findings"]
    assert p.returncode == 0, p.stdout + p.stderr
