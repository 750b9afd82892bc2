"""The compile check's judge reads its worker's answers field by field (issue 37): the worker
imported the code under review, so whatever it answers is data, and an answer that is not one
(malformed, for kernels or architectures not asked, a built kernel with no PTX, a worker that died
or failed) fails the job closed with a finding that says so. Each adversarial answer has its honest
twin, read as the compile check reads a real build: a 32-bit offset in the PTX is found; against
the base's answer it is new; a base that gives no answer leaves it judged as it is."""
from __future__ import annotations

import json
import socket
import struct
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from gpu_gate.findings import Severity, Status
from gpu_gate.judge.channel import SocketChannel, WorkerLost
from gpu_gate.judge.checks import compile as compile_check
from gpu_gate.judge.job import Context, Outcome
from gpu_gate.protocol import wire
from gpu_gate.protocol.jobs import DIFFERENTIAL, Job
from gpu_gate.protocol.messages import (CompileFacts, CompileReply, CompileRequest, ResourceFacts, TritonBuildFacts,
                                        TritonKernelFacts, put_text, read_request)

KERNEL_FILE = '''import triton
import triton.language as tl


@triton.jit
def scale(Y, X, stride, BLOCK: tl.constexpr):
    row = tl.program_id(0)
    tl.store(Y + row * stride, tl.load(X + row * stride))
'''
# The PTX of a kernel whose address offset is a 32-bit product of its program index and a stride
# (as tests/judge/test_compiled_offsets.py's), and of its widened twin.
NARROW = """
.visible .entry scale(.param .u64 scale_param_0, .param .u32 scale_param_1)
{
	ld.param.u64 	%rd1, [scale_param_0];
	ld.param.u32 	%r1, [scale_param_1];
	mov.u32 	%r2, %ctaid.x;
	mul.lo.s32 	%r3, %r2, %r1;
	mul.wide.s32 	%rd2, %r3, 4;
	add.s64 	%rd3, %rd1, %rd2;
	st.global.u32 	[%rd3], %r3;
	ret;
}
"""
WIDE = NARROW.replace("mul.lo.s32 \t%r3, %r2, %r1;\n\tmul.wide.s32 \t%rd2, %r3, 4;",
                      "mul.wide.s32 \t%rd4, %r2, %r1;\n\tshl.b64 \t%rd2, %rd4, 2;")
assert WIDE != NARROW

Answer = Callable[[CompileRequest], Any]  # a request -> (reply's header, blobs), or an exception to raise


class Scripted(SocketChannel):
    """The judge's real channel to a worker that answers what the test says: the request crosses
    the socket and is read as a worker reads it; the answer crosses back as the header and blobs
    given, and the judge reads it as it reads any worker's."""

    def __init__(self, answer: Answer, name: str = "compiler") -> None:
        judge_end, self.worker_end = socket.socketpair()
        super().__init__(judge_end, name)
        self.answer_for = answer

    def answer(self, deadline: float | None = None) -> Any:
        header, blobs = wire.recv(self.worker_end)
        request = read_request(header, [len(b) for b in blobs])
        assert isinstance(request, CompileRequest)
        got = self.answer_for(request)
        if isinstance(got, Exception):
            self.worker_end.close()  # the worker is gone
        elif isinstance(got[1], Claimed):  # a header that claims blobs, none of them sent
            head = json.dumps({"op": "compile", **got[0], "_blobs": got[1].sizes}).encode()
            self.worker_end.sendall(struct.pack("<Q", len(head)) + head)
        else:
            wire.send(self.worker_end, {"op": "compile", **got[0]}, got[1])
        return super().answer(deadline)

    def close(self) -> None:
        super().close()
        self.worker_end.close()


class Claimed:
    """Blob sizes a reply's header claims, with no bytes behind them."""

    def __init__(self, *sizes: int) -> None:
        self.sizes = list(sizes)


def facts(request: CompileRequest, ptx: str | None = NARROW, **changes: Any) -> tuple[dict[str, Any], list[bytes]]:
    """An honest answer to ``request`` for KERNEL_FILE, with ``changes`` to the kernel's facts."""
    blobs: list[Any] = []
    builds = tuple(TritonBuildFacts(arch, True, resources=(ResourceFacts("scale", "scale", arch, registers=8),),
                                    ptx=put_text(ptx, blobs) if arch == request.read_arch else None)
                   for arch in request.archs)
    kernel = {"name": "scale", "found": True, "source": "/repo/lib/k.py", "signature": {"Y": "*fp32"},
              "constexprs": {"BLOCK": 64}, "guessed": False, "missing": (), "builds": builds, **changes}
    reply = CompileReply(CompileFacts(request.file, "/repo", "triton", kernels=(TritonKernelFacts(**kernel),)))
    return reply.to_json(), [] if "builds" in changes else blobs  # builds given: the PTX made here is not named


@pytest.fixture()
def trees(tmp_path: Path) -> tuple[Path, Path]:
    head, base = tmp_path / "head", tmp_path / "base"
    for root in (head, base):
        (root / "lib").mkdir(parents=True)
        (root / "lib" / "k.py").write_text(KERNEL_FILE)
    return head, base


def judge(root: Path, head: Answer, base: Answer | None = None, base_root: Path | None = None) -> Outcome:
    options: dict[str, Any] = {"archs": ["sm_80", "sm_90"]}
    channels: dict[str, Any] = {"compiler": Scripted(head)}
    if base is not None:
        options[DIFFERENTIAL] = "0123456789abcdef"
        channels["base"] = Scripted(base, "base")
    job = Job(id="compile:lib/k.py", check="compile", level="required", kernels=("lib/k.py",), options=options)
    ctx = Context(repo_root=root, device="cpu", workdir=root.parent, channels=channels, base_root=base_root)
    return compile_check.run(job, ctx)


def _kinds(out: Outcome) -> list[tuple[str, Severity]]:
    return [(f.kind, f.severity) for f in out.findings]


def test_an_honest_answer_is_judged_the_offset_found(trees: tuple[Path, Path]) -> None:
    out = judge(trees[0], facts)
    assert out.status is Status.PASSED and out.cases == 2, out.findings
    assert _kinds(out) == [("int32-offset", Severity.WARNING)]
    assert out.extra.linted == ["scale"] and out.extra.resources is not None and len(out.extra.resources) == 2
    assert judge(trees[0], lambda r: facts(r, WIDE)).findings == []


@pytest.mark.parametrize("answer, said", [
    (lambda r: ({"facts": {**facts(r)[0]["facts"], "kernels": "all fine"}}, []), "expected a list"),
    (lambda r: ({"status": "passed", "findings": []}, []), "expected a mapping"),  # a forged result, not facts
    (lambda r: (facts(r)[0], []), "blob 0 is out of range"),  # the PTX blob left out
    (lambda r: (facts(r)[0], facts(r)[1] * 2), "carries 2 blobs and describes 1"),  # a blob no field names
    (lambda r: (facts(r)[0], Claimed(257 << 20)), "claim 269484032 bytes, more than"),  # beyond what was asked
    (lambda r: facts(r, builds=()), "builds for [], asked for ['sm_80', 'sm_90']"),
    (lambda r: facts(r, name="other"), "it answered for Triton kernels ['other'], asked for ['scale']"),
    (lambda r: facts(r, ptx=None), "built for sm_90 with no PTX"),
    (lambda r: facts(r, source=""), "no source file"),
])
def test_an_answer_that_is_not_one_fails_closed(trees: tuple[Path, Path], answer: Answer, said: str) -> None:
    out = judge(trees[0], answer)
    assert out.status is Status.ERROR, out
    [f] = [f for f in out.findings if f.kind == "protocol"]
    assert said in f.message and f.file == "lib/k.py" and f.severity is Severity.ERROR, f.message
    assert "the compile worker's answer" in (out.reason or "")


@pytest.mark.parametrize("answer, kind, said", [
    (lambda r: WorkerLost("end of stream"), "crash", "the compile worker exited or died before answering"),
    (lambda r: ({"error": "worker", "message": "RecursionError: too deep"}, []), "worker-error",
     "the compile worker failed (RecursionError: too deep)"),
])
def test_a_worker_that_does_not_answer_fails_closed(trees: tuple[Path, Path], answer: Answer, kind: str,
                                                    said: str) -> None:
    out = judge(trees[0], answer)
    assert out.status is Status.ERROR and [f.kind for f in out.findings] == [kind], out
    assert out.findings[0].message.startswith(f"lib/k.py: {said}"), out.findings[0].message


def test_against_the_base_the_offset_is_new_and_blocks(trees: tuple[Path, Path]) -> None:
    head, base = trees
    out = judge(head, facts, lambda r: facts(r, WIDE), base)
    offsets = [f for f in out.findings if f.kind == "int32-offset"]
    assert [(f.severity, f.details["change"]) for f in offsets] == [(Severity.ERROR, "new")]
    assert out.status is Status.FAILED
    assert "1 new, 0 pre-existing and 0 fixed" in out.findings[-1].message
    debt = judge(head, facts, facts, base)
    assert [f.details.get("change") for f in debt.findings if f.kind == "int32-offset"] == ["pre-existing"]
    assert debt.status is Status.PASSED


def test_the_base_is_asked_for_the_architecture_read_only(trees: tuple[Path, Path]) -> None:
    asked: list[CompileRequest] = []

    def base(r: CompileRequest) -> Any:
        asked.append(r)
        return facts(r, WIDE)

    judge(trees[0], facts, base, trees[1])
    assert [(r.archs, r.read_arch) for r in asked] == [(("sm_90",), "sm_90")]


def test_a_base_that_gives_no_answer_leaves_the_head_judged_as_it_is(trees: tuple[Path, Path]) -> None:
    head, base = trees
    out = judge(head, facts, lambda r: WorkerLost("end of stream"), base)
    assert [(f.kind, f.severity, f.details.get("change")) for f in out.findings[:-1]] == [
        ("int32-offset", Severity.WARNING, None)]
    assert out.status is Status.PASSED
    assert "not compared with the base's build (0123456789ab): the base's compile worker exited or died" \
        in out.findings[-1].message
