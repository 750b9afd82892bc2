"""The protocol attacks made as a pull request would make them: a kernel, imported in the sandboxed
candidate worker, writes a forged reply on the worker's socket to the judge (found among the
process's open descriptors, as any code in it can) before the worker's own. The job is red with a ``protocol`` finding that
names the worker and what was wrong; the honest twin beside them is green. Run through the
executor (judge, sandboxes, socket pairs), in a process of its own, whose children's peak memory
(the judge's among them) the kernel reports."""
from __future__ import annotations

import json
import subprocess
import sys
import textwrap
import pytest

from test_protocol_attacks import SCENARIOS as CHANNEL_SCENARIOS

SPEC = """\
import gpu_gate as gg
from lib.{name} import double

@gg.spec(dims={{"n": gg.Dim(1, 64)}}, inputs={{"x": gg.Tensor(("n",), dtypes=["float32"])}},
         reference=lambda x: x * 2)
def {name}_gate(x):
    return double(x)
"""

FORGING_KERNEL = """\
import json, os, socket, struct

HEADER = {header!r}
SIZES = {sizes!r}

def _judges_socket():
    # the worker's end of its socket to the judge, found as any code in the process can find it
    for name in sorted(os.listdir("/proc/self/fd"), key=int):
        try:
            if not os.readlink(f"/proc/self/fd/{{name}}").startswith("socket:"):
                continue
        except OSError:
            continue
        s = socket.socket(fileno=os.dup(int(name)))
        kind = (s.family, s.type)
        os.close(s.detach())
        if kind == (socket.AF_UNIX, socket.SOCK_STREAM):
            return int(name)
    raise RuntimeError("no socket to the judge")

def double(x):
    fd = _judges_socket()
    head = HEADER.encode() if isinstance(HEADER, str) else json.dumps({{**HEADER, "_blobs": SIZES}}).encode()
    os.write(fd, struct.pack("<Q", len(head)) + head)
    for n in SIZES:
        os.write(fd, bytes(min(n, 1 << 16)))  # a 3 GiB claim is never sent
    return x * 2
"""

HONEST_KERNEL = """\
def double(x):
    return x * 2
"""

OUT = {"kind": "tensor", "tensor": {"dtype": "float32", "shape": [4], "blob": 0, "stride": [1], "device": "cpu"}}


def _reply(out: dict[str, object]) -> dict[str, object]:
    return {"op": "call", "status": "ok", "outputs": {"out": out}, "side_streams": 0, "run_s": 0.0,
            "compile_s": 0.0}


def _with(**over: object) -> dict[str, object]:
    return {**OUT, "tensor": {**OUT["tensor"], **over}}  # type: ignore[dict-item]


ATTACKS: dict[str, tuple[object, list[int], str]] = {
    "claims_3_gib": (_reply(OUT), [3 << 30], "bytes asked for"),
    "negative_shape": (_reply(_with(shape=[-4])), [16], "is out of range [0,"),
    "blob_out_of_range": (_reply(_with(blob=9)), [16], "blob 9 is out of range"),
    "unknown_dtype": (_reply(_with(dtype="float99")), [16], "is not one of torch's dtypes"),
    "header_not_json": ("{not json at all", [], "a header that is not JSON"),
    "blob_count_mismatch": (_reply(OUT), [16, 16], "carries 2 blobs and describes 1"),
}

RUN = r"""
import json, resource, sys
from pathlib import Path
from gpu_gate.executor.options import ExecOptions
from gpu_gate.executor.scheduling import execute
from gpu_gate.protocol.jobs import Job, SpecRef

root, names = Path(sys.argv[1]), json.loads(sys.argv[2])
jobs = [Job(id=f"equivalence:{n}", check="equivalence", level="required", kernels=(),
            spec=SpecRef(f"gate/{n}_gate.py", f"{n}_gate"), options={"cases": 4, "growth": False, "shrink": False})
        for n in names]
results = execute(jobs, ExecOptions(repo_root=root, gpus=(), timeout_s=300))
peak = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
print(json.dumps({"results": [r.to_json() for r in results], "children_peak_kib": peak}))
"""


@pytest.fixture(scope="module")
def gate(tmp_path_factory: pytest.TempPathFactory) -> dict[str, object]:
    root = tmp_path_factory.mktemp("protocol")
    (root / "lib").mkdir()
    (root / "lib" / "__init__.py").write_text("")
    (root / "gate").mkdir()
    kernels = {name: FORGING_KERNEL.format(header=header, sizes=sizes) for name, (header, sizes, _) in ATTACKS.items()}
    kernels["honest"] = HONEST_KERNEL
    for name, code in kernels.items():
        (root / "lib" / f"{name}.py").write_text(textwrap.dedent(code))
        (root / "gate" / f"{name}_gate.py").write_text(SPEC.format(name=name))
    r = subprocess.run([sys.executable, "-c", RUN, str(root), json.dumps(sorted(kernels))], capture_output=True,
                       text=True, timeout=1800)
    assert r.returncode == 0, r.stderr[-4000:]
    got = json.loads(r.stdout.strip().splitlines()[-1])
    return {"results": {res["spec"].split("::")[1].removesuffix("_gate"): res for res in got["results"]},
            "children_peak_kib": got["children_peak_kib"]}


@pytest.mark.parametrize("attack", sorted(ATTACKS))
def test_a_forged_reply_fails_the_job_with_a_protocol_finding(gate: dict[str, object], attack: str) -> None:
    r = gate["results"][attack]  # type: ignore[index]
    errors = [f for f in r["findings"] if f["severity"] == "error"]
    assert r["status"] == "error", (r["status"], errors)
    f = [f for f in errors if f["kind"] == "protocol"]
    assert len(f) == 1, errors
    assert f[0]["message"].startswith("the candidate worker's reply to 'call' breaks gpu-gate's protocol"), f
    assert ATTACKS[attack][2] in f[0]["message"], f
    assert "internal error" not in json.dumps(r)


def test_no_process_of_the_run_grew_to_what_a_header_claimed(gate: dict[str, object]) -> None:
    """The judge of the 3 GiB claim allocated and zeroed 3.16 GB before its fix; every process of
    this run (judges and workers, each importing torch) stayed under 1.5 GiB."""
    assert int(gate["children_peak_kib"]) < 1536 << 10, gate["children_peak_kib"]  # type: ignore[call-overload]


def test_the_honest_twin_passes(gate: dict[str, object]) -> None:
    r = gate["results"]["honest"]  # type: ignore[index]
    assert r["status"] == "passed", r["findings"]
    assert not [f for f in r["findings"] if f["severity"] != "note"]


def test_the_channel_level_scenarios_are_the_same_attacks() -> None:
    """Each attack made from inside a worker here is also made by the fake worker of
    ``test_protocol_attacks.py`` (where the judge's own peak memory is measured)."""
    assert set(ATTACKS) <= set(CHANNEL_SCENARIOS), set(ATTACKS) - set(CHANNEL_SCENARIOS)
