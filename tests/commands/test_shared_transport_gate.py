"""Large outputs cross from a sandboxed worker to the judge as sealed memory files, end to end on a
real repository: the verdict is the same as through the stream (a head wrong in one element of a
2 MiB output is red), the timing says what crossed how, and a candidate that unseals its own
outputs (it runs in the worker's process, so it can patch the worker's code) is refused: the job
fails closed with a protocol finding."""
from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from conftest_git import GitRepo
from test_sandbox_gate import POLICY, gate

pytestmark = pytest.mark.skipif(shutil.which("bwrap") is None, reason="bubblewrap is not installed (CI installs it)")

# a scale kernel's wrapper, as a library would test it, at the sizes it runs in training
SPEC = """\
import gpu_gate as gg
{prelude}

@gg.spec(dims={{"n": gg.Dim(1 << 19, 1 << 20)}}, inputs={{"x": gg.Tensor(("n",), dtypes=("float32",))}},
         reference=lambda x: x * 2, covers=["csrc/k.cu"])
def scale_gate(x):
    {body}
"""

UNSEAL = """\
import fcntl
import gpu_gate.protocol.shared as _shared
_shared._SEALS = fcntl.F_SEAL_SHRINK | fcntl.F_SEAL_GROW  # no write seal: the bytes could change after the judge read them
"""


def _repo(make_repo, body: str, prelude: str = "") -> GitRepo:  # type: ignore[no-untyped-def]
    r = make_repo("proj", {".gpu-gate.yml": POLICY.format(mode="required"), "README.md": "x\n"})
    r.branch("feature")
    r.commit("kernel", {"csrc/k.cu": "__global__ void k(float* x) {}\n",
                        "gate/scale_gate.py": SPEC.format(body=body, prelude=prelude)})
    return r


def _job(r: GitRepo) -> dict[str, object]:
    results = json.loads((Path(r.path) / ".gpu-gate" / "out" / "results.json").read_text())["results"]
    (job,) = [x for x in results if x["job_id"].startswith("equivalence:")]
    return dict(job)


def test_a_correct_head_is_green_and_its_outputs_crossed_as_shared_memory(make_repo) -> None:  # type: ignore[no-untyped-def]
    r = _repo(make_repo, "return x * 2")
    p = gate("check", "--cpu", "--base", "main", "--head", "feature", cwd=r.path)
    job = _job(r)
    assert job["status"] == "passed", (p.stdout[-3000:], p.stderr[-3000:])
    wire = job["extra"]["timing"]["wire"]
    assert wire["judge"]["received_shared_mb"] >= 2 * 2.0, wire  # two cases' outputs of 2-4 MiB each
    assert wire["head"]["sent_shared_mb"] >= 2 * 2.0, wire
    assert wire["judge"]["received_mb"] < 1.0, wire  # the stream carried headers and small tensors only


def test_a_head_wrong_in_one_element_of_a_large_output_is_red(make_repo) -> None:  # type: ignore[no-untyped-def]
    r = _repo(make_repo, "y = x * 2\n    y[-1] += 1.0\n    return y")
    p = gate("check", "--cpu", "--base", "main", "--head", "feature", cwd=r.path)
    job = _job(r)
    assert p.returncode == 1 and job["status"] == "failed", (p.stdout[-3000:], job)
    assert job["extra"]["timing"]["wire"]["judge"]["received_shared_mb"] > 0


def test_a_candidate_that_unseals_its_outputs_is_refused(make_repo) -> None:  # type: ignore[no-untyped-def]
    r = _repo(make_repo, "return x * 2", prelude=UNSEAL)
    p = gate("check", "--cpu", "--base", "main", "--head", "feature", cwd=r.path)
    job = _job(r)
    assert p.returncode == 1 and job["status"] == "error", (p.stdout[-3000:], job)
    kinds = [f["kind"] for f in job["findings"]]
    assert "protocol" in kinds, job["findings"]
    assert any("not sealed against writes" in f["message"] for f in job["findings"]), job["findings"]
