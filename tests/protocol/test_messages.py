"""Every message between the judge and a worker is a typed record: each one crosses as JSON and is
read back into the same record, and a field of the wrong type, size or shape is refused on receipt
with a message that names the message and the field."""
from __future__ import annotations

import json
from typing import Any

import pytest

from gpu_gate.protocol.jobs import Job, SpecRef
from gpu_gate.protocol.messages import (REPLIES, REQUESTS, Ahead, AheadDone, AheadDoneReply, AheadReply, BaselineFp32,
                                        BaselineFp32Reply, Bye, Call, CallDone, CallFailed, CompileFacts, CompileReply,
                                        CompileRequest, Describe, DescribeReply,
                                        ErrorReply, Finish, FinishReply, Geometry, GradRecipe, GuardedInput,
                                        Flops, FlopsReply, HeadReference, HeadReferenceReply, Load, LoadReply, Release, ReleaseReply,
                                        SpecDescription, SpecImportFacts, SpecImportReply, Stats, StatsReply,
                                        TensorMeta, Time, Timed, Truth, TruthReply, Upstream, UpstreamReply, ValueMeta,
                                        Watch,
                                        read_reply, read_request)
from gpu_gate.protocol.wire import BadMessage

JOB = Job(id="equivalence:g.py::g", check="equivalence", level="required", kernels=("k.py",), spec=SpecRef("g.py", "g"))
T0 = TensorMeta("float32", (2, 3), 0, (3, 1), "cpu")
T1 = TensorMeta("uint8", (8200,), 1)
DESCRIPTION = SpecDescription(
    name="g", dims={"n": {"kind": "Dim", "lo": 1, "hi": 8}}, inputs={"x": {"kind": "Tensor", "shape": ["n"]}},
    dim_args=(), grads=("x",), covers=("k.py",), deterministic=False, tolerance={"baseline_factor": 2.0},
    devices=("cpu",), checks=None, module="g", file="g.py", line=3, accumulate=None, params=(), mutates={},
    producer=())
RECIPE = {"out": GradRecipe((2, 3), 22, False)}

REQUESTS_MADE = [
    (Load(JOB), []), (Describe(), []), (Finish({"archs": ["sm_90"]}), []), (Ahead(("tok1", "tok2")), []),
    (AheadDone(), []), (Stats(), []), (Release(), []), (Bye(), []),
    (Call(dims={"n": 3}, hold=True, upstream=RECIPE, inputs={"x": GuardedInput(T1, Geometry((3,), (1,), 0, "float32", 12))},
          refill={"x": TensorMeta("uint8", (8200,), 0)}, producer=("x",), plain={"x": "contiguous"}), [8200, 8200]),
    (Call(dims={"n": 3}, upstream_again=True), []),
    (Upstream("tok", "c0001", 1), []), (Truth("tok", "c0001", 0, {"out": "bfloat16"}), []),
    (BaselineFp32("tok", "c0001", 0, {"out": "float16"}), []), (HeadReference("tok", "c0001"), []),
    (Flops("tok", "c0001"), []),
    (CompileRequest("lib/k.py", ("sm_80", "sm_90"), "sm_90", ("k",)), []),
    (Time(5, 3, fresh=True, flush=False), []),
]

REPLIES_MADE = [
    (LoadReply("cpu", torch_import_s=1.5, late_cuda_settings=("CUDA_LAUNCH_BLOCKING",), uses_triton=True), []),
    (SpecImportReply(SpecImportFacts("spec-import-error", "g.py", 3, "boom", "trace")), []),
    (DescribeReply(DESCRIPTION, True, None), []),
    (FinishReply({"kernels": []}, ({"file": "k.py", "count": 2},), {"kernels": {}}, 1, ("k",), ("/x.py",),
                 {"finished": True}, {"launches_s": 0.1}), []),
    (AheadReply(ok=True), []), (AheadDoneReply({"launched_built": 2}), []),
    (StatsReply({"sent_mb": 1.0}, 2.0, None), []), (ReleaseReply(), []),
    (CallDone(outputs={"out": ValueMeta("tensor", T0, type_name="torch.Tensor"), "n": ValueMeta("value", value=3),
                       "o": ValueMeta("opaque", type_name="x.Y", why="no bytes"), "h": ValueMeta("held")},
              early={}, same_as_held=("h",), where={"out": (4096, 4096)}, input_spans={"x": (1, 2)},
              inputs_changed={"x": T1, "y": None}, watch=(Watch((2,), TensorMeta("uint8", (4096,), 2),
                                                                 TensorMeta("uint8", (4096,), 3)),),
              side_streams=1, run_s=0.5, held_sms="no SMs", held_caller=True), [24, 8200, 4096, 4096]),
    (CallFailed("refused", "input must be contiguous", "Traceback"), []),
    (UpstreamReply(RECIPE, False, "it uses lib.kern from the repository", "base"), []),
    (TruthReply({"out": ValueMeta("tensor", TensorMeta("float64", (2, 3), 0))},
                {"out": ValueMeta("tensor", TensorMeta("float32", (2, 3), 1))},
                {"out": ValueMeta("tensor", TensorMeta("float64", (2, 3), 2))}), [48, 24, 48]),
    (BaselineFp32Reply({"out": ValueMeta("tensor", TensorMeta("float16", (2, 3), 0))}, None), [12]),
    (HeadReferenceReply(skipped="the head's spec takes other dims"), []),
    (FlopsReply(flops=3 * 2 * 64 * 97 * 64, isolated=True, tree="base"), []),
    (ErrorReply("truth", "reference", "the spec's reference raised ZeroDivisionError", True, None), []),
    (ErrorReply("truth", "oom", "the spec's reference ran out of GPU memory on case k0", False, "it uses lib", "base"),
     []),
    (CompileReply(CompileFacts("csrc/a.cu", "/repo", "cuda", ptx=0)), [120]),
    (Timed((1.5e-4, 1.4e-4), "cuda-events", 1980.0, 100 << 20), []),
]


def _crossed(message: Any) -> dict[str, Any]:
    return json.loads(json.dumps(message.to_json()))  # type: ignore[no-any-return]


@pytest.mark.parametrize("message,sizes", REQUESTS_MADE, ids=lambda m: type(m).__name__)
def test_every_request_reads_back_as_itself(message: Any, sizes: list[int]) -> None:
    assert read_request(_crossed(message), sizes) == message


@pytest.mark.parametrize("message,sizes", REPLIES_MADE, ids=lambda m: type(m).__name__)
def test_every_reply_reads_back_as_itself(message: Any, sizes: list[int]) -> None:
    assert read_reply(message.op, _crossed(message), sizes) == message


def test_sixteen_requests_each_with_its_reply() -> None:
    """The protocol's kinds of message: 16 requests (the compile check's and the speed check's among
    them); each but ``bye`` gets its own reply (the load its spec-import reply too, and any of them an
    error reply)."""
    assert len(REQUESTS) == 16 and set(REPLIES) == set(REQUESTS) - {"bye"}
    assert {type(m).op for m, _ in REQUESTS_MADE} == set(REQUESTS)
    assert {m.op for m, _ in REPLIES_MADE} == set(REPLIES)


def _call(out: dict[str, Any], **over: Any) -> dict[str, Any]:
    done = _crossed(CallDone(outputs={"out": ValueMeta("tensor", TensorMeta("float32", (4,), 0))}))
    done["outputs"]["out"]["tensor"].update(out)
    return {**done, **over}


@pytest.mark.parametrize("header,sizes,said", [
    (_call({"shape": [-4]}), [16], "call reply outputs['out'] tensor shape[0]: -4 is out of range"),
    (_call({"shape": [2] * 17}), [16], "17 dims (at most 16)"),
    (_call({"blob": 3}), [16], "blob 3 is out of range (the reply to call carries 1 blobs)"),
    (_call({"blob": True}), [16], "blob True is out of range"),
    (_call({"dtype": "float99"}), [16], "'float99' is not one of torch's dtypes"),
    (_call({"dtype": "Tensor"}), [16], "'Tensor' is not one of torch's dtypes"),
    (_call({}), [1 << 30], "blob 0 claims 1073741824 bytes for a tensor of 16 bytes"),
    (_call({}), [16, 16], "the reply to call carries 2 blobs and describes 1"),
    (_call({}, side_streams=-1), [16], "side_streams: -1 is out of range"),
    (_call({}, held_sms=[1]), [16], "held_sms: expected text"),
    (_call({}, op="truth"), [16], "a reply to 'truth' where 'call' was asked"),
    (_call({}, status="great"), [16], "unknown status 'great'"),
    ({"op": "call", "error": "nope", "message": "x"}, [], "unknown error 'nope'"),
    ({"op": "call", "error": "reference", "message": "x", "isolated": False, "tree": "remote"}, [],
     "unknown tree 'remote'"),
    (["not", "a", "mapping"], [], "expected a mapping"),
])
def test_a_malformed_reply_is_refused_naming_what_is_wrong(header: Any, sizes: list[int], said: str) -> None:
    with pytest.raises(BadMessage) as e:
        read_reply("call", header, sizes)
    assert said in str(e.value)


@pytest.mark.parametrize("seconds,how,said", [
    ([], "wall", "0 timings"),
    ([1e-3, -1e-3], "wall", "not a positive finite number"),
    ([1e-3, float("nan")], "wall", "not a positive finite number"),
    ([0.0], "cuda-events", "not a positive finite number"),
    ([1e-3], "sundial", "unknown timing method"),
    (["fast"], "wall", "expected a number"),
])
def test_a_timing_that_is_not_a_time_is_refused(seconds: list[Any], how: str, said: str) -> None:
    """A worker that answers the speed check with no timing, a zero, a negative or NaN time (which
    would count as fast) breaks the protocol; it is never a figure."""
    with pytest.raises(BadMessage, match=said):
        read_reply("time", {"op": "time", "seconds": seconds, "how": how}, [])


def test_a_reply_with_two_tensors_on_one_blob_is_refused() -> None:
    header = _crossed(TruthReply({"a": ValueMeta("tensor", TensorMeta("float64", (1,), 0))},
                                 {"a": ValueMeta("tensor", TensorMeta("float64", (1,), 0))}, {}))
    with pytest.raises(BadMessage, match="blob 0 is described twice"):
        read_reply("truth", header, [8])


def test_a_dtype_the_judge_did_not_ask_in_is_refused_by_the_worker_too() -> None:
    with pytest.raises(BadMessage, match="is not one of torch's dtypes"):
        read_request(_crossed(Truth("tok", "c0", 0, {"out": "float128"})), [])


def test_an_unknown_request_is_refused() -> None:
    with pytest.raises(BadMessage, match="an unknown request 'exec'"):
        read_request({"op": "exec", "code": "import os"}, [])


@pytest.mark.parametrize("header,said", [
    ({"op": "flops", "flops": -1}, "flops: -1 is out of range"),
    ({"op": "flops", "flops": True}, "expected an integer"),
    ({"op": "flops"}, "expected the count, or why there is none"),
    ({"op": "flops", "flops": 5, "skipped": "both"}, "expected the count, or why there is none"),
])
def test_a_malformed_flops_reply_is_refused(header: Any, said: str) -> None:
    """The count bounds the speed check's floor: a reference worker's reply that is not one is refused."""
    with pytest.raises(BadMessage) as e:
        read_reply("flops", header, [])
    assert said in str(e.value)
