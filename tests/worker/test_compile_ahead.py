"""Compiling ahead (gpu_gate.worker.ahead): the sibling process a worker starts to compile the
cases' Triton kernels beside it. Its dry runs need a GPU (tests/gpu); here, what does not: it
starts with the worker's interpreter and environment, ends with it, says what it did, and leaves
Triton as it found it."""
from __future__ import annotations

import json
import os
import sys
import time
import types
from pathlib import Path

import pytest

from gpu_gate.worker.tritonlaunch import Launch
from gpu_gate.protocol.cases import Case, InputChoice
from gpu_gate.protocol.jobs import Job, SpecRef
from gpu_gate.worker import ahead

SPEC = """\
import torch
import gpu_gate as gg

@gg.spec(dims={"n": gg.Dim(1, 64)}, inputs={"x": gg.Tensor(("n",), dtypes=["float32"])},
         reference=lambda x: x * 2)
def double_gate(x):
    return x * 2
"""


def _repo(tmp: Path) -> tuple[Path, Job, list[str]]:
    (tmp / "gate").mkdir(parents=True)
    (tmp / "gate" / "double_gate.py").write_text(SPEC)
    job = Job(id="equivalence:gate/double_gate.py::double_gate", check="equivalence", level="required", kernels=(),
              spec=SpecRef("gate/double_gate.py", "double_gate"), seed=1)
    case = Case("c0000", 7, {"n": 33}, {"x": InputChoice("float32", "normal", "contiguous")})
    return tmp, job, [case.token()]


def test_not_wanted_without_a_gpu_or_under_the_interpreter(monkeypatch: pytest.MonkeyPatch) -> None:
    assert ahead.wanted("cpu") == "no GPU: nothing is compiled"
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    assert ahead.wanted("cuda") == "Triton's interpreter compiles nothing"
    assert ahead.Ahead().start(Job(id="x", check="equivalence", level="required", kernels=()), [], Path("."),
                               Path("."), "cpu", 2) == {"skipped": "no GPU: nothing is compiled"}


def test_the_sibling_runs_the_workers_interpreter_says_what_it_did_and_ends_with_it(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    repo, job, tokens = _repo(tmp_path / "repo")
    work = tmp_path / "work"
    work.mkdir()
    monkeypatch.setattr(ahead, "wanted", lambda device: None)
    a = ahead.Ahead()
    # the worker's interpreter options go to the sibling (-I: nothing of the repository shadows gpu-gate)
    monkeypatch.setattr(sys, "orig_argv", [sys.executable, "-I", "-B", "-c", "pass"])
    assert a.start(job, tokens, repo, work, "cuda", 2) == {"ok": True}
    assert a.start(job, tokens, repo, work, "cuda", 2) == {"skipped": "already compiling ahead"}
    proc = a.proc
    assert proc is not None
    for _ in range(600):  # without a GPU its dry run fails; it says so, and exits
        if (work / "ahead" / "done.json").exists():
            break
        time.sleep(0.1)
    done = json.loads((work / "ahead" / "done.json").read_text())
    # it imported the spec and tried the one case (building its inputs on a GPU there is not)
    assert done["cases"] == 0 and done["failed"] == 1 and done["compiled"] == 0, done
    said = a.stop()
    assert said["finished"] is True and proc.poll() is not None and a.proc is None
    assert a.stop() == {}


def test_a_sibling_still_compiling_is_killed_when_the_worker_stops_it(tmp_path: Path,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    repo, job, tokens = _repo(tmp_path / "repo")
    work = tmp_path / "work"
    work.mkdir()
    monkeypatch.setattr(ahead, "wanted", lambda device: None)
    monkeypatch.setattr(ahead, "boot", lambda: "import time; time.sleep(600)")
    a = ahead.Ahead()
    a.start(job, tokens, repo, work, "cuda", 2)
    proc = a.proc
    assert proc is not None and proc.poll() is None
    start = time.monotonic()
    assert a.stop() == {"finished": False}
    assert proc.poll() is not None and time.monotonic() - start < 5
    with pytest.raises(ProcessLookupError):
        os.kill(proc.pid, 0)


def _alive(pid: int) -> bool:
    """Whether ``pid`` is a live process (a zombie waiting for its reaper is dead)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state not in ("Z", "X")


def test_the_compilers_a_stopped_sibling_was_running_die_with_it(tmp_path: Path,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    """Triton compiles on a pool of threads, each running ptxas as a child process: a sibling killed
    mid-compile left them running, re-parented to the sandbox's init, and the job was red for an
    ``escaped-process`` the gate's own compiling had left (seen on an H200, Liger-Kernel's group norm,
    six ptxas processes). Its children now end with it, before the worker goes on."""
    repo, job, tokens = _repo(tmp_path / "repo")
    work = tmp_path / "work"
    work.mkdir()
    pids = tmp_path / "compilers.txt"
    monkeypatch.setattr(ahead, "wanted", lambda device: None)
    # a stand-in for a compiling sibling: two "ptxas" children, still running
    monkeypatch.setattr(ahead, "boot", lambda: (
        "import subprocess, sys, time\n"
        "kids = [subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(600)']) for _ in range(2)]\n"
        f"open({str(pids)!r}, 'w').write(' '.join(str(k.pid) for k in kids))\n"
        "time.sleep(600)\n"))
    a = ahead.Ahead()
    a.start(job, tokens, repo, work, "cuda", 2)
    for _ in range(300):
        if pids.exists() and len(pids.read_text().split()) == 2:
            break
        time.sleep(0.05)
    kids = [int(p) for p in pids.read_text().split()]
    assert all(_alive(k) for k in kids)
    start = time.monotonic()
    assert a.stop() == {"finished": False}
    assert time.monotonic() - start < 5
    assert not any(_alive(k) for k in kids), "a compiler the sibling started outlived it"


def test_launches_become_compiles_only_inside_and_triton_is_as_it_was_after() -> None:
    jit = pytest.importorskip("triton.runtime.jit")
    autotuner = pytest.importorskip("triton.runtime.autotuner")
    run, tuned = jit.JITFunction.run, autotuner.Autotuner.run
    with ahead._launches_compile_only() as count:
        assert jit.JITFunction.run is not run and autotuner.Autotuner.run is not tuned
        # an autotuned kernel is left to the worker's own runs: nothing is launched nor picked here
        assert autotuner.Autotuner.run(object()) is None
        assert count == [0]
    assert jit.JITFunction.run is run and autotuner.Autotuner.run is tuned


def test_started_with_the_worker_for_an_equivalence_job_and_given_the_cases_later(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    repo, job, tokens = _repo(tmp_path / "repo")
    work = tmp_path / "work"
    work.mkdir()
    a = ahead.Ahead()
    # only for an equivalence job on a GPU, not under compute-sanitizer, not for one case (a repro)
    for other in (Job(id="r", check="racecheck", level="required", kernels=()),
                  Job(id="s", check="equivalence", level="required", kernels=(), options={"sanitizer": "memcheck"}),
                  Job(id="c", check="equivalence", level="required", kernels=(), case=tokens[0])):
        assert a.early(other, repo, work, "cuda") is False
    assert a.early(job, repo, work, "cpu") is False and a.proc is None
    assert a.early(job, repo, work, "cuda") is True
    proc = a.proc
    assert proc is not None
    time.sleep(1.0)
    assert proc.poll() is None  # importing, then waiting for its cases
    monkeypatch.setattr(ahead, "wanted", lambda device: None)
    assert a.start(job, tokens, repo, work, "cuda", 2) == {"ok": True}
    assert proc.wait(60) == 0
    done = json.loads((work / "ahead" / "done.json").read_text())
    assert done["cases"] == 0 and done["failed"] == 1, done  # it got the one case (no GPU here to build it on)
    assert a.stop()["finished"] is True


def test_an_early_sibling_that_is_never_given_cases_ends_with_its_worker(tmp_path: Path) -> None:
    repo, job, _ = _repo(tmp_path / "repo")
    work = tmp_path / "work"
    work.mkdir()
    a = ahead.Ahead()
    assert a.early(job, repo, work, "cuda") is True
    proc = a.proc
    assert proc is not None
    said = a.stop()  # the judge never asked (a spec without Triton kernels, say)
    assert proc.poll() is not None and said.get("finished") in (True, False)


def _fake_launch(name: str) -> Launch:
    return Launch("lib/k.py", name, {"BLOCK": 64}, {"x": "*fp32"}, {"num_warps": 4}, fn=object())


def test_the_launches_the_sibling_built_are_taken_and_only_the_rest_compiled(monkeypatch: pytest.MonkeyPatch) -> None:
    """The worker's finish compiles, for the compile check, only what its sibling did not build
    already (the same launch for the same arch); the report reads the same either way."""
    from gpu_gate.worker import tritonc
    from gpu_gate.cuda.nvcc import KernelResources
    from gpu_gate.worker import specializations

    compiled: list[tuple[str, int]] = []

    def compile_kernel(fn: object, config: object, cc: int) -> tritonc.TritonBuild:
        compiled.append((str(config), cc))
        return tritonc.TritonBuild("k", "", [KernelResources("k", "k", f"sm_{cc}", registers=cc)])

    monkeypatch.setattr(tritonc, "compile_kernel", compile_kernel)
    monkeypatch.setattr(tritonc, "launched_config", lambda fn, c, s, o: f"config{sorted(c.items())}")
    a, b = _fake_launch("a"), _fake_launch("b")
    launches = [("lib/k.py", a), ("lib/k.py", b)]
    alone = specializations.compile_launched(launches, ["sm_80", "sm_90"])
    assert len(compiled) == 4
    compiled.clear()
    sibling = [{"key": list(a.key), "arch": "sm_90", "name": "k",
                "resources": [KernelResources("k", "k", "sm_90", registers=90).to_json()]},
               {"key": list(b.key), "arch": "sm_80", "name": "k",
                "resources": [KernelResources("k", "k", "sm_80", registers=80).to_json()]}]
    known = specializations.builds_from_json(json.loads(json.dumps(sibling)))
    helped = specializations.compile_launched(launches, ["sm_80", "sm_90"], known)
    assert sorted(cc for _, cc in compiled) == [80, 90], "only a/sm_80 and b/sm_90 were left to compile"
    assert helped == alone


def test_what_the_sibling_built_is_read_field_by_field() -> None:
    """Its file is the code under test's (the same sandbox as the worker): what does not read is
    left out, and the worker compiles that itself."""
    from gpu_gate.worker import specializations

    a = _fake_launch("a")
    good = {"key": list(a.key), "arch": "sm_90", "name": "k", "resources": [{"kernel": "k", "symbol": "k",
                                                                            "arch": "sm_90", "registers": 32}]}
    junk = [3, {"key": list(a.key)}, {"key": 5, "arch": "sm_80", "name": "k", "resources": []},
            {**good, "arch": "sm_80", "resources": [{"registers": 1}]}]
    read = specializations.builds_from_json([*junk, good])
    assert list(read) == [(a.key, "sm_90")] and read[(a.key, "sm_90")].resources[0].registers == 32
    assert specializations.builds_from_json({"not": "a list"}) == {}


def test_the_worker_waits_for_a_sibling_still_building_and_not_for_one_that_hangs(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    repo, job, tokens = _repo(tmp_path / "repo")
    a = _fake_launch("a")
    built = [{"key": list(a.key), "arch": "sm_90", "name": "k", "resources": []}]
    finishing = ("import json, pathlib, time\n"
                 "d = pathlib.Path('.')\n(d / 'building').write_text('')\ntime.sleep(1.5)\n"
                 f"(d / 'launched.json').write_text({json.dumps(json.dumps(built))})\n")
    for program, wait_s, expected in ((finishing, 30.0, [(a.key, "sm_90")]),
                                      ("import pathlib, time\npathlib.Path('building').write_text('')\n"
                                       "time.sleep(600)\n", 1.0, [])):
        work = tmp_path / f"work{wait_s}"
        work.mkdir()
        monkeypatch.setattr(ahead, "boot", lambda program=program: program)
        sib = ahead.Ahead()
        assert sib.early(job, repo, work, "cuda", builds=True) is True
        while not (work / "ahead" / "building").exists():
            time.sleep(0.05)
        start = time.monotonic()
        assert list(sib.builds(wait_s)) == expected
        assert time.monotonic() - start < wait_s + 5
        sib.stop()
    # a sibling that never started building (still in its dry runs): not waited for
    monkeypatch.setattr(ahead, "boot", lambda: "import time; time.sleep(600)")
    sib = ahead.Ahead()
    work = tmp_path / "work_dry"
    work.mkdir()
    sib.early(job, repo, work, "cuda", builds=True)
    start = time.monotonic()
    assert sib.builds(30.0) == {} and time.monotonic() - start < 2
    sib.stop()


def test_a_sibling_that_built_beside_its_dry_runs_is_not_waited_for_until_it_ends(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The builds written while the dry runs go on: the worker's finish takes them at once, not
    when the sibling's dry runs end (the job's last step waited for them)."""
    repo, job, _ = _repo(tmp_path / "repo")
    a = _fake_launch("a")
    built = [{"key": list(a.key), "arch": "sm_90", "name": "k", "resources": []}]
    program = ("import json, pathlib, time\n"
               "d = pathlib.Path('.')\n(d / 'building').write_text('')\ntime.sleep(0.5)\n"
               f"(d / 'launched.json').write_text({json.dumps(json.dumps(built))})\n"
               "(d / 'building').unlink()\ntime.sleep(600)\n")
    monkeypatch.setattr(ahead, "boot", lambda: program)
    work = tmp_path / "work"
    work.mkdir()
    sib = ahead.Ahead()
    assert sib.early(job, repo, work, "cuda", builds=True) is True
    while not (work / "ahead" / "building").exists():
        time.sleep(0.05)
    start = time.monotonic()
    assert list(sib.builds(30.0)) == [(a.key, "sm_90")]
    assert time.monotonic() - start < 5
    sib.stop()


def test_the_builds_start_once_the_dry_runs_have_launched_as_many_as_are_built(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from gpu_gate.worker import specializations

    got: list[tuple[int, int]] = []

    def fake_build(launches: list[object], settings: object, job: object, repo_root: object, here: Path,
                   threads: int) -> dict[str, object]:
        got.append((len(launches), threads))
        return {"launched_built": len(launches)}

    monkeypatch.setattr(ahead, "_build_launched", fake_build)
    monkeypatch.setattr(specializations, "repo_launches", lambda launches, root, kernels: list(launches))
    record = types.SimpleNamespace(launches=[])
    job = types.SimpleNamespace(kernels=())
    early = ahead._Builds(record, {"archs": ["sm_90"]}, job, tmp_path, tmp_path, 8)  # type: ignore[arg-type]
    for i in range(specializations.MAX_COMPILED + 3):
        record.launches.append(i)
        early.start_if_known()
    assert early.done() == {"launched_built": specializations.MAX_COMPILED, "launched_early": True}
    assert got == [(specializations.MAX_COMPILED, 4)], "beside the dry runs, on half the threads"
    got.clear()
    record.launches[:] = [1, 2]
    late = ahead._Builds(record, {}, job, tmp_path, tmp_path, 8)  # type: ignore[arg-type]
    late.start_if_known()
    assert late.thread is None
    assert late.done() == {"launched_built": 2, "launched_early": False} and got == [(2, 8)]
