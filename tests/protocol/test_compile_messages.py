"""The compile check's messages: what its worker answers crosses as typed records, and every field
is checked on receipt, before any blob's bytes are read. A field of the wrong type, a negative count,
a bool for a number, a PTX blob index out of range or described twice, a PTX larger than its bound,
a blob no field names: none is an answer (BadMessage), whatever else the answer says."""
from __future__ import annotations

import copy
import json
from typing import Any

import pytest

from gpu_gate.protocol.messages import (CompileFacts, CompileReply, CompileRequest, DiagnosticFacts, NvccFacts,
                                        ResourceFacts, TritonBuildFacts, TritonKernelFacts, ptx_text, read_reply,
                                        read_request)
from gpu_gate.protocol.messages.compile import MAX_PTX
from gpu_gate.protocol.wire import BadMessage

PTX = ".version 8.0\n.target sm_90\n.visible .entry k()\n{\n\tret;\n}\n"


def _triton() -> CompileFacts:
    row = ResourceFacts("k", "k", "sm_90", registers=12, shared_bytes=4)
    builds = (TritonBuildFacts("sm_80", True, resources=(row,)),
              TritonBuildFacts("sm_90", True, resources=(row,), ptx=0))
    kernel = TritonKernelFacts("k", True, "/repo/lib/k.py", {"x": "*fp32", "BLOCK": "constexpr"}, {"BLOCK": 64},
                               False, (), builds)
    return CompileFacts("lib/k.py", "/repo", "triton", kernels=(kernel, TritonKernelFacts("j", False)))


def _cuda() -> CompileFacts:
    diag = DiagnosticFacts("csrc/a.cu", 2, "error", 'identifier "x" is undefined')
    return CompileFacts("csrc/a.cu", "/repo", "cuda", nvcc=(NvccFacts("sm_90", False, how="exited with code 2",
                                                                       diagnostics=(diag,)),), ptx=None)


def _wire(facts: CompileFacts) -> tuple[dict[str, Any], list[bytearray]]:
    """As the judge receives it: the reply's JSON (its facts), and the blobs as bytes."""
    blobs = [bytearray(PTX.encode())] if facts.language == "triton" else []
    return json.loads(json.dumps(CompileReply(facts).to_json()))["facts"], blobs


def _read(facts: Any, blobs: list[bytearray]) -> CompileFacts:
    """The facts as the judge reads a compile reply: against its blobs' sizes only."""
    reply = read_reply("compile", {"op": "compile", "facts": facts}, [len(b) for b in blobs])
    assert isinstance(reply, CompileReply)
    return reply.facts


@pytest.mark.parametrize("facts", [_triton(), _cuda()], ids=["triton", "cuda"])
def test_facts_cross_unchanged(facts: CompileFacts) -> None:
    d, blobs = _wire(facts)
    assert _read(d, blobs) == facts


def test_the_ptx_travels_as_a_blob_not_in_the_header() -> None:
    d, blobs = _wire(_triton())
    assert PTX not in json.dumps(d)
    assert d["kernels"][0]["builds"][1]["ptx"] == 0 and d["kernels"][0]["builds"][0]["ptx"] is None
    assert ptx_text(_read(d, blobs).kernels[0].builds[1].ptx, blobs) == PTX


def test_a_ptx_larger_than_its_bound_is_refused_before_it_is_read() -> None:
    d, _ = _wire(_triton())
    with pytest.raises(BadMessage, match=f"blob 0 claims {MAX_PTX + 1} bytes"):
        read_reply("compile", {"op": "compile", "facts": d}, [MAX_PTX + 1])


def test_a_blob_no_field_names_or_one_named_twice_is_refused() -> None:
    d, blobs = _wire(_triton())
    with pytest.raises(BadMessage, match="carries 2 blobs and describes 1"):
        _read(d, blobs + [bytearray(b"x")])
    twice = _set(d, ("kernels", 0, "builds", 0, "ptx"), 0)
    with pytest.raises(BadMessage, match="blob 0 is described twice"):
        _read(twice, blobs)


def _set(d: dict[str, Any], path: tuple[Any, ...], value: Any) -> dict[str, Any]:
    d = copy.deepcopy(d)
    at: Any = d
    for key in path[:-1]:
        at = at[key]
    at[path[-1]] = value
    return d


BUILD = ("kernels", 0, "builds", 1)


@pytest.mark.parametrize("path, value, said", [
    (("language",), "rust", "unknown language"),
    (("root",), "", "empty"),
    (("file",), 7, "expected text"),
    (("kernels",), {"k": 1}, "expected a list"),
    (("kernels", 0, "found"), 1, "expected true or false"),
    ((*BUILD, "ptx"), 5, "blob 5 is out of range"),
    ((*BUILD, "ptx"), -1, "blob -1 is out of range"),
    ((*BUILD, "ptx"), True, "blob True is out of range"),
    ((*BUILD, "resources", 0, "registers"), -3, "registers: -3 is out of range"),
    ((*BUILD, "resources", 0, "spill_store"), 1.5, "expected an integer"),
    ((*BUILD, "resources", 0, "local_bytes"), True, "expected an integer"),
    ((*BUILD, "node_line"), "12", "expected an integer"),
    (("kernels", 0, "constexprs"), {"BLOCK": [64]}, "not a number"),
    (("kernels", 0, "signature"), {"x": 3}, "expected text"),
    (("kernels", 0, "missing"), "BLOCK", "expected a list"),
    (("kernels",), [{}] * 5000, r"5000 entries \(at most 4096\)"),
])
def test_a_malformed_triton_answer_is_not_an_answer(path: tuple[Any, ...], value: Any, said: str) -> None:
    d, blobs = _wire(_triton())
    with pytest.raises(BadMessage, match=said):
        _read(_set(d, path, value), blobs)


@pytest.mark.parametrize("path, value, said", [
    (("nvcc", 0, "ok"), "yes", "expected true or false"),
    (("nvcc", 0, "diagnostics", 0, "severity"), "fatal", "unknown severity"),
    (("nvcc", 0, "diagnostics", 0, "line"), -2, "line: -2 is out of range"),
    (("nvcc", 0, "resources"), None, "expected a list"),
    (("ptx",), 0, "blob 0 is out of range"),
])
def test_a_malformed_nvcc_answer_is_not_an_answer(path: tuple[Any, ...], value: Any, said: str) -> None:
    d, blobs = _wire(_cuda())
    with pytest.raises(BadMessage, match=said):
        _read(_set(d, path, value), blobs)


def test_not_a_mapping_at_all() -> None:
    with pytest.raises(BadMessage, match="expected a mapping"):
        _read(["facts"], [])


def test_a_request_crosses_unchanged_and_a_bad_one_is_refused() -> None:
    request = CompileRequest("lib/k.py", ("sm_80", "sm_90"), "sm_90", ("k",), {"k": {"constexprs": {"BLOCK": 64}}},
                             ("include",), ("-O3",), 120.0, ("src",))
    assert read_request(json.loads(json.dumps(request.to_json())), []) == request
    with pytest.raises(BadMessage, match="timeout"):
        read_request({**request.to_json(), "timeout_s": -1}, [])
