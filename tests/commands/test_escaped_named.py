"""Processes left running, named and compared with the base's (issue 40, part 4). A wrapper whose
package starts a helper process at import (as a compile-worker pool does) leaves it running after
every worker: at the base and at the head alike it is the repository's habit, reported by name and
not blocking; added by the change, it blocks, by name. Real git repositories, real sandboxes."""
from __future__ import annotations

import os

from test_differential import EXACT, _check, _pr, _repo

# Started once, at import, and left to run (the helper's command line carries a marker to find it by).
HELPER = """\
import subprocess
import sys

_helper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)  # gate-helper-{tag}"],
                           stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                           start_new_session=True)

"""


def _escapes(results: dict) -> list[dict]:  # type: ignore[type-arg]
    return [f for r in results.get("results", []) for f in r["findings"] if f["kind"] == "escaped-process"]


def test_a_helper_the_base_starts_too_is_named_and_does_not_block(make_repo) -> None:  # type: ignore[no-untyped-def]
    tag = f"both-{os.getpid()}"
    r = _repo(make_repo, HELPER.format(tag=tag) + EXACT)
    _pr(r, HELPER.format(tag=tag) + EXACT.replace("x", "rows"))  # a renamed parameter: a token, so the spec runs
    code, text, results = _check(r)
    assert code == 0, text
    found = _escapes(results)
    assert found and {f["details"]["change"] for f in found} == {"pre-existing"}, found
    assert any(f"gate-helper-{tag}" in p for f in found for p in f["details"]["processes"]), found
    assert "started" in found[0]["message"] and "into the job" in found[0]["message"]


def test_a_helper_the_change_adds_blocks_by_name(make_repo) -> None:  # type: ignore[no-untyped-def]
    tag = f"added-{os.getpid()}"
    r = _repo(make_repo, EXACT)
    _pr(r, HELPER.format(tag=tag) + EXACT)
    code, text, results = _check(r)
    assert code == 1, text
    new = [f for f in _escapes(results) if f["details"].get("change") == "new"]
    assert new and f"gate-helper-{tag}" in new[0]["message"], _escapes(results)
    assert "must not outlive its job" in new[0]["message"]
