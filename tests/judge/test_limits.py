"""What the judge accepts from a worker, and the memory it allows itself (gpu_gate/judge/limits.py)."""
from __future__ import annotations

import resource
import subprocess
import sys

import gpu_gate as gg
from gpu_gate.judge.limits import REPLY_FLOOR, memory_limit, reply_budget
from gpu_gate.protocol.cases import Case, InputChoice

GIB = 1 << 30


def test_the_judge_memory_limit_as_documented() -> None:
    assert memory_limit({}, "cpu", None) == 10 * GIB  # 8 GiB + 8 x the default 256 MiB case
    assert memory_limit({}, "cuda", None) == 72 * GIB  # 8 GiB + 8 x an 8 GiB production shape
    assert memory_limit({"max_case_bytes": 2 * GIB}, "cpu", None) == 24 * GIB
    assert memory_limit({}, "cuda", 32 * GIB) == 32 * GIB  # never more than the machine's memory


def test_a_reply_about_a_case_may_carry_sixteen_times_the_case() -> None:
    spec = gg.spec(dims={"n": gg.Dim(1, 8)}, inputs={"x": gg.Tensor(("n",), dtypes=["float32"])},
                   reference=lambda x: x)(lambda x: x)
    case = Case("c0", 1, {"n": 1000}, {"x": InputChoice("float32", "normal", "contiguous")})
    # the schedule counts 1000 float32 inputs as 1000 x (4 + 8 + 4) x 3 bytes
    assert reply_budget(spec, case) == REPLY_FLOOR + 16 * 48_000


LIMITED = """
import resource, sys
from gpu_gate.judge.limits import limit_memory
limit = limit_memory({}, "cpu")
soft, _ = resource.getrlimit(resource.RLIMIT_DATA)
try:
    bytearray(limit + (1 << 30))
    print(limit, soft, "allocated")
except MemoryError:
    print(limit, soft, "refused")
"""


def test_the_judge_holds_itself_to_its_limit() -> None:
    """In a process of its own: the limit is set (RLIMIT_DATA), and an allocation beyond it is
    refused (a MemoryError, which fails the job closed), not taken from the runner."""
    r = subprocess.run([sys.executable, "-c", LIMITED], capture_output=True, text=True, timeout=300)
    limit, soft, what = r.stdout.split()
    assert int(limit) == int(soft) <= 10 * GIB and what == "refused", r.stdout + r.stderr


def test_a_lower_limit_already_set_is_kept() -> None:
    code = "import resource; resource.setrlimit(resource.RLIMIT_DATA, (3 << 30, resource.RLIM_INFINITY));" + \
           LIMITED
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert r.stdout.split()[:2] == [str(3 << 30)] * 2, r.stdout + r.stderr


JUDGE = """
import json, pathlib, resource, socket, sys, tempfile
from gpu_gate.judge import job as judged

seen = {}

def run_job(job, ctx):  # the judge's work, as far as this test goes: see its limit, then exceed it
    seen["soft"] = resource.getrlimit(resource.RLIMIT_DATA)[0]
    raise MemoryError

judged.run_job = run_job
a, b = socket.socketpair()
d = pathlib.Path(tempfile.mkdtemp())
job = {"id": "equivalence:g.py::g", "check": "equivalence", "level": "required", "kernels": [],
       "spec": {"file": "g.py", "name": "g"}}
context = {"device": "cpu", "channels": {"candidate": a.fileno(), "reference": b.fileno()}} if sys.argv[1] == "judged" \\
    else {"device": "cpu"}
(d / "in.json").write_text(json.dumps({"job": job, "context": context}))
judged.main([str(d / "in.json"), str(d / "out.json")])
print(json.dumps({"soft": seen["soft"], "result": json.loads((d / "out.json").read_text())}))
"""


def test_the_judge_of_sandboxed_workers_runs_under_its_limit_and_fails_closed_at_it() -> None:
    import json

    r = subprocess.run([sys.executable, "-c", JUDGE, "judged"], capture_output=True, text=True, timeout=300)
    got = json.loads(r.stdout.strip().splitlines()[-1])
    assert 0 < got["soft"] <= 10 * GIB, got
    res = got["result"]
    assert res["status"] == "error" and [f["kind"] for f in res["findings"]] == ["judge-memory"], res
    assert "memory limit it sets itself" in res["findings"][0]["message"]
    # a job that writes its own result (no workers of its own) is left as it was
    r = subprocess.run([sys.executable, "-c", JUDGE, "alone"], capture_output=True, text=True, timeout=300)
    unchanged = resource.getrlimit(resource.RLIMIT_DATA)[0]
    assert json.loads(r.stdout.strip().splitlines()[-1])["soft"] == unchanged, r.stdout + r.stderr
