"""A worker that lies about what it sends: the judge reads its reply against what it asked for,
before a byte of any blob, and a reply that breaks the protocol fails the job closed, naming the
worker and what was wrong. Never an allocation of what the worker claims, never an internal error.

The judge's side runs in a process of its own, over a real socket pair, against a fake worker
process (each scenario below is what that fake worker answers the judge's ``call``); the judge's
peak memory is read from the kernel (``getrusage``) in its own process. The same attacks made by a
kernel from inside a real worker, through the executor, are in ``test_protocol_attacks_gate.py``.
"""
from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import pytest

# What the fake worker sends in reply to ``call``: a header (a dict, or raw bytes that are not
# JSON) and the blobs that follow it (their claimed sizes, or the bytes themselves).
OK_OUTPUT = {"kind": "tensor", "tensor": {"dtype": "float32", "shape": [4], "blob": 0, "stride": [1],
                                          "device": "cpu"}}


def _reply(outputs: dict[str, object], **over: object) -> dict[str, object]:
    return {"op": "call", "status": "ok", "outputs": outputs, "early": {}, "same_as_held": [], "where": {},
            "held_where": {}, "input_spans": {}, "inputs_changed": {}, "watch": [], "side_streams": 0,
            "run_s": 0.0, "compile_s": 0.0, "held_sms": None, "produced": None, "held_caller": None, **over}


def _tensor(**over: object) -> dict[str, object]:
    return {"kind": "tensor", "tensor": {**OK_OUTPUT["tensor"], **over}}  # type: ignore[dict-item]


SCENARIOS: dict[str, tuple[object, list[int], str]] = {
    # (header, blob sizes sent, what the judge's finding must say)
    "claims_3_gib": (_reply({"out": OK_OUTPUT}), [3 << 30], "more than the"),
    "negative_shape": (_reply({"out": _tensor(shape=[-4])}), [16], "out of range [0,"),
    "blob_out_of_range": (_reply({"out": _tensor(blob=7)}), [16], "blob 7 is out of range"),
    "unknown_dtype": (_reply({"out": _tensor(dtype="float99")}), [16], "'float99' is not one of torch's dtypes"),
    "header_not_json": (b"{'op': 'call', not json", [], "not JSON"),
    "blob_count_mismatch": (_reply({"out": OK_OUTPUT}), [16, 16], "carries 2 blobs and describes 1"),
    "blob_larger_than_output": (_reply({"out": OK_OUTPUT}), [1 << 20], "claims 1048576 bytes for a tensor of 16"),
    "reply_to_another_op": (_reply({"out": OK_OUTPUT}, op="truth"), [16], "a reply to 'truth' where 'call'"),
    "field_of_wrong_type": (_reply({"out": OK_OUTPUT}, side_streams="many"), [16], "expected an integer"),
    "honest": (_reply({"out": OK_OUTPUT}), [16], ""),
}

FAKE_WORKER = r"""
import json, socket, struct, sys, time
from gpu_gate.protocol import wire

sock = socket.socket(fileno=int(sys.argv[1]))
header, sizes = json.loads(sys.argv[2]), json.loads(sys.argv[3])
wire.recv(sock)  # the judge's call
if isinstance(header, str):  # raw bytes that are not JSON
    raw = header.encode()
    sock.sendall(struct.pack("<Q", len(raw)) + raw)
else:
    head = json.dumps({**header, "_blobs": sizes}).encode()
    sock.sendall(struct.pack("<Q", len(head)) + head)
    # the bytes of the blobs it claims, up to 1 MiB each: a 3 GiB claim is never sent
    for n in sizes:
        sock.sendall(bytes(min(n, 1 << 20)))
time.sleep(30)  # keeps the socket open: the judge must not wait for what never comes
"""

JUDGE = r"""
import json, resource, socket, subprocess, sys, time
import gpu_gate as gg
from gpu_gate.judge.channel import ProtocolViolation, SocketChannel, WorkerTimeout
from gpu_gate.judge.workers import Candidate
from gpu_gate.protocol.cases import Case, InputChoice
from gpu_gate.protocol.inputs import materialize

spec = gg.spec(dims={"n": gg.Dim(1, 8)}, inputs={"x": gg.Tensor(("n",), dtypes=["float32"])},
               reference=lambda x: x * 2)(lambda x: x * 2)
case = Case("c0000", 1, {"n": 4}, {"x": InputChoice("float32", "normal", "contiguous")})
m = materialize(spec, case, "cpu")
judge, worker = socket.socketpair()
fake = subprocess.Popen([sys.executable, "-c", sys.argv[1], str(worker.fileno()), sys.argv[2], sys.argv[3]],
                        pass_fds=(worker.fileno(),))
worker.close()
cand = Candidate(SocketChannel(judge, "candidate"), "cpu", time.monotonic() + 20, spec)
before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
start = time.monotonic()
try:
    report = cand.call(case, None, inputs=m)
    outcome = {"status": report.status, "outputs": {k: v.tolist() for k, v in report.outputs.items()}}
except ProtocolViolation as exc:
    outcome = {"violation": str(exc)}
except WorkerTimeout as exc:
    outcome = {"timeout": str(exc)}
peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
fake.kill()
print(json.dumps({**outcome, "grew_kib": peak - before, "seconds": time.monotonic() - start}))
"""


def _judge(scenario: str) -> dict[str, object]:
    header, sizes, _ = SCENARIOS[scenario]
    sent = header.decode() if isinstance(header, bytes) else header
    r = subprocess.run([sys.executable, "-c", JUDGE, textwrap.dedent(FAKE_WORKER), json.dumps(sent), json.dumps(sizes)],
                       capture_output=True, text=True, timeout=900)
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout.strip().splitlines()[-1])  # type: ignore[no-any-return]


@pytest.mark.parametrize("scenario", sorted(s for s in SCENARIOS if s != "honest"))
def test_a_reply_that_breaks_the_protocol_is_a_violation_naming_the_worker(scenario: str) -> None:
    got = _judge(scenario)
    assert "violation" in got, got
    message = str(got["violation"])
    assert message.startswith("the candidate worker's reply to 'call' breaks gpu-gate's protocol"), message
    assert SCENARIOS[scenario][2] in message, message


def test_a_header_claiming_3_gib_costs_the_judge_nothing() -> None:
    """A 45-byte header announcing a 3 GiB blob made the judge allocate and zero 3.16 GB before a
    byte arrived; now the claim is refused against what the judge asked for, at once."""
    got = _judge("claims_3_gib")
    assert "violation" in got, got
    assert int(got["grew_kib"]) < 64 << 10, got  # the judge's peak memory grew by less than 64 MiB
    assert float(got["seconds"]) < 10, got  # refused at once, not after waiting for the bytes


def test_the_honest_twin_is_read_whole() -> None:
    got = _judge("honest")
    assert got.get("status") == "ok" and got.get("outputs") == {"out": [0.0, 0.0, 0.0, 0.0]}, got
