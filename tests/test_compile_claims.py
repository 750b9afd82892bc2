"""One compile per kernel between a worker and its compiling sibling (gpu_gate.worker.compile_claims).

Real processes, a real Triton cache and real compiles (for sm_90: Triton compiles without a GPU).
Process A claims a kernel and compiles it slowly; process B, started once A's claim is there, wants
the same kernel. With claims B waits and reads A's binary (it writes nothing into the cache); without
them it compiles the kernel again. The claimant's failure and death end the wait at once; a claim
never released ends it after the bound."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytest.importorskip("triton")

ROOT = Path(__file__).resolve().parents[1]

PROGRAM = r'''
import json, sys, time
from pathlib import Path
import triton
import triton.language as tl
from triton.runtime import cache

from gpu_gate.cuda import tritonc
from gpu_gate.worker import compile_claims, specializations


@triton.jit
def scale(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(out_ptr + offs, tl.load(x_ptr + offs, mask=mask) * 3.0, mask=mask)


mode, claims, out = sys.argv[1], Path(sys.argv[2]), Path(sys.argv[3])
compile_claims.MAX_WAIT_S = float(sys.argv[4]) if len(sys.argv) > 4 else compile_claims.MAX_WAIT_S
if mode != "unarmed":
    assert compile_claims.arm(claims)
puts = [0]
put = cache.FileCacheManager.put


def counted_put(self, data, filename, binary=True):
    puts[0] += 1
    if mode in ("slow", "fail", "die", "hold") and puts[0] == 1:
        (out.parent / (out.name + ".claimed")).write_text("")  # the claim is taken: B may start
        time.sleep(2.0 if mode != "hold" else 3600)
        if mode == "fail":
            raise RuntimeError("this compile fails")
        if mode == "die":
            import os
            os._exit(3)
    return put(self, data, filename, binary)


cache.FileCacheManager.put = counted_put
config = tritonc.launched_config(scale, {"BLOCK": 128}, {"x_ptr": "*fp32", "out_ptr": "*fp32", "n": "i32"})
launch = type("L", (), {"fn": scale})()
start = time.monotonic()
try:
    built = specializations._compile(launch, config, "sm_90")
    ptx = built.ptx
except RuntimeError as exc:
    ptx = "error: " + str(exc)
out.write_text(json.dumps({"s": time.monotonic() - start, "puts": puts[0], "ptx": ptx,
                           "stats": compile_claims.stats(),
                           "claims_left": sorted(p.name for p in claims.glob("*")) if claims.exists() else []}))
'''


def _start(tmp: Path, mode: str, name: str, *extra: str) -> tuple[subprocess.Popen[bytes], Path]:
    prog = tmp / "prog.py"
    prog.write_text(PROGRAM)
    out = tmp / f"{name}.json"
    env = {**os.environ, "TRITON_CACHE_DIR": str(tmp / "triton-cache"), "PYTHONPATH": str(ROOT)}
    p = subprocess.Popen([sys.executable, str(prog), mode, str(tmp / "claims"), str(out), *extra], env=env,
                         stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    return p, out


def _wait_claimed(out: Path, proc: subprocess.Popen[bytes], timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while not (out.parent / (out.name + ".claimed")).exists():
        assert proc.poll() is None, proc.stdout.read().decode() if proc.stdout else ""
        assert time.monotonic() < deadline, "the first process never began its compile"
        time.sleep(0.02)


def _result(proc: subprocess.Popen[bytes], out: Path) -> dict:
    text = proc.communicate(timeout=300)[0].decode()
    assert out.exists(), text
    return json.loads(out.read_text())


def test_the_second_process_waits_for_the_claimed_compile_and_reads_its_binary(tmp_path: Path) -> None:
    a, a_out = _start(tmp_path, "slow", "a")
    _wait_claimed(a_out, a)
    b, b_out = _start(tmp_path, "armed", "b")
    ra, rb = _result(a, a_out), _result(b, b_out)
    assert ra["stats"]["claimed"] == 1 and ra["puts"] > 0
    assert rb["stats"] == {**rb["stats"], "claimed": 0, "waited": 1, "gave_up": 0}
    assert rb["puts"] == 0, "the second process compiled the kernel again"
    assert rb["ptx"] == ra["ptx"] and ".entry scale" in rb["ptx"]
    assert ra["claims_left"] == [] and rb["claims_left"] == []


def test_without_claims_the_second_process_compiles_it_again(tmp_path: Path) -> None:
    """The control: the same two processes, the second one unarmed, compile twice."""
    a, a_out = _start(tmp_path, "slow", "a")
    _wait_claimed(a_out, a)
    b, b_out = _start(tmp_path, "unarmed", "b")
    ra, rb = _result(a, a_out), _result(b, b_out)
    assert rb["puts"] > 0 and rb["ptx"] == ra["ptx"]


def test_a_claimants_failed_compile_releases_its_claim_and_the_waiter_compiles(tmp_path: Path) -> None:
    a, a_out = _start(tmp_path, "fail", "a")
    _wait_claimed(a_out, a)
    b, b_out = _start(tmp_path, "armed", "b")
    ra, rb = _result(a, a_out), _result(b, b_out)
    assert ra["ptx"] == "error: this compile fails"
    assert rb["stats"]["claimed"] == 1 and rb["stats"]["gave_up"] == 0 and rb["puts"] > 0
    assert ".entry scale" in rb["ptx"] and rb["s"] < 25, "the waiter waited for a compile that had failed"
    assert rb["claims_left"] == []


def test_a_claimant_that_dies_mid_compile_is_not_waited_for(tmp_path: Path) -> None:
    a, a_out = _start(tmp_path, "die", "a")
    _wait_claimed(a_out, a)
    b, b_out = _start(tmp_path, "armed", "b")
    assert a.wait(60) == 3
    rb = _result(b, b_out)
    assert rb["stats"]["claimed"] == 1 and rb["stats"]["gave_up"] == 0 and ".entry scale" in rb["ptx"]
    assert rb["s"] < 25


def test_a_claim_never_released_is_waited_for_no_longer_than_the_bound(tmp_path: Path) -> None:
    a, a_out = _start(tmp_path, "hold", "a")
    try:
        _wait_claimed(a_out, a)
        b, b_out = _start(tmp_path, "armed", "b", "2.0")
        rb = _result(b, b_out)
    finally:
        a.send_signal(signal.SIGKILL)
        a.wait(30)
    assert rb["stats"]["gave_up"] == 1 and rb["stats"]["waited_s"] >= 2.0 and rb["puts"] > 0
    assert ".entry scale" in rb["ptx"]


def test_triton_is_as_it_was_after_disarm_and_overrides_are_never_claimed(tmp_path: Path,
                                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    from triton.runtime import cache

    from gpu_gate.worker import compile_claims

    monkeypatch.setenv("TRITON_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setenv("TRITON_OVERRIDE_DIR", str(tmp_path / "override"))
    before = (cache.FileCacheManager.__init__, cache.FileCacheManager.get_group, cache.FileCacheManager.put_group)
    claims = tmp_path / "claims"
    try:
        assert compile_claims.arm(claims)
        assert cache.FileCacheManager.get_group is not before[1]
        assert cache.FileCacheManager("k" * 8, override=True).get_group("x.json") is None
        assert list(claims.iterdir()) == []  # an override directory is not the cache: nothing claimed
        m = cache.FileCacheManager("k" * 8)
        assert m.get_group("x.json") is None and [p.name for p in claims.iterdir()] == ["kkkkkkkk__x.json"]
        compile_claims.release_mine()  # the compile ended without a group (failed): the claim goes
        assert list(claims.iterdir()) == []
    finally:
        compile_claims.disarm()
    after = (cache.FileCacheManager.__init__, cache.FileCacheManager.get_group, cache.FileCacheManager.put_group)
    assert after == before
