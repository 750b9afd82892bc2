"""Fault injection for the executor: lost GPUs, killed jobs, whole-run time limits.

Jobs are real subprocesses running the real harness; only the GPU health probe is injected,
since this machine has no GPU to lose.
"""
from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from gpu_gate.executor import argv, scheduling, sandbox
from gpu_gate.executor.options import ExecOptions
from gpu_gate.executor.scheduling import execute
from gpu_gate.findings import Status
from gpu_gate.protocol.jobs import Job, SpecRef

SPEC = """\
import gpu_gate as gg

@gg.spec(dims={{"n": gg.Dim(1, 64)}}, inputs={{"x": gg.Tensor(("n",))}}, reference=lambda x: x * 2)
def {name}(x):
    {body}
"""


def _jobs(root: Path, bodies: dict[str, str]) -> list[Job]:
    (root / "gate").mkdir(exist_ok=True)
    jobs = []
    for name, body in bodies.items():
        (root / "gate" / f"{name}_gate.py").write_text(SPEC.format(name=name, body=body))
        jobs.append(Job(id=f"equivalence:gate/{name}_gate.py::{name}", check="equivalence", level="required",
                        kernels=(), spec=SpecRef(f"gate/{name}_gate.py", name),
                        options={"cases": 2, "growth": False, "shrink": False}))
    return jobs


SEGV = "import os, signal; os.kill(os.getpid(), signal.SIGSEGV)"


def test_a_lost_gpu_stops_its_worker_and_the_others_take_the_jobs(tmp_path: Path) -> None:
    jobs = _jobs(tmp_path, {f"k{i}": SEGV for i in range(4)})
    opts = ExecOptions(repo_root=tmp_path, gpus=("0", "1"), timeout_s=120,
                       health_probe=lambda g: "GPU is lost (Xid 79)" if g == "0" else None)
    results = execute(jobs, opts)
    assert len(results) == 4
    lost = [r for r in results if any(f.kind == "infrastructure" for f in r.findings)]
    assert len(lost) == 1
    assert lost[0].findings[-1].message == "GPU 0 is unusable after this job: GPU is lost (Xid 79)"
    assert all(r.status is Status.ERROR for r in results)


def test_when_every_gpu_is_lost_the_remaining_jobs_fail_closed(tmp_path: Path) -> None:
    jobs = _jobs(tmp_path, {f"k{i}": SEGV for i in range(4)})
    opts = ExecOptions(repo_root=tmp_path, gpus=("0", "1"), timeout_s=120, health_probe=lambda g: "GPU is lost")
    results = execute(jobs, opts)
    assert len(results) == 4
    leftover = [r for r in results if r.reason == "no healthy GPU left on this runner to run the job"]
    assert len(leftover) == 2
    assert all(r.status is Status.ERROR for r in leftover)


def test_a_job_killed_from_outside_points_at_host_memory(tmp_path: Path) -> None:
    jobs = _jobs(tmp_path, {"oom": "import os, signal; os.kill(os.getpid(), signal.SIGKILL)",
                            "fine": "return x * 2"})
    results = {r.job_id: r for r in execute(jobs, ExecOptions(repo_root=tmp_path, gpus=(), timeout_s=120))}
    killed = results["equivalence:gate/oom_gate.py::oom"]
    assert killed.status is Status.ERROR
    assert "killed by SIGKILL" in killed.findings[0].message
    assert "ran out of host memory" in killed.findings[0].message
    assert results["equivalence:gate/fine_gate.py::fine"].status is Status.PASSED


def test_the_whole_run_time_limit_cuts_jobs_and_fails_closed(tmp_path: Path) -> None:
    jobs = _jobs(tmp_path, {"hang": "import time; time.sleep(600)", "later": "return x * 2"})
    jobs[1] = Job(**{**jobs[1].__dict__, "cost": 0.0})  # runs second on the single worker
    start = time.monotonic()
    opts = ExecOptions(repo_root=tmp_path, gpus=(), timeout_s=600, run_deadline=time.monotonic() + 6, workers=1)
    results = {r.job_id: r for r in execute(jobs, opts)}
    assert time.monotonic() - start < 60
    hang = results["equivalence:gate/hang_gate.py::hang"]
    assert hang.findings[0].kind == "timeout"
    assert hang.findings[0].message.endswith("(the whole run's time limit cut this job short)")
    later = results["equivalence:gate/later_gate.py::later"]
    assert later.status is Status.ERROR
    assert later.reason == "the whole run's time limit was reached before this job started"


def test_jobs_share_a_gpu_only_when_its_memory_allows() -> None:
    from gpu_gate.executor.slots import GpuSlots
    import threading

    free = {"0": 1 << 30}
    slots = GpuSlots(per_gpu=2, free=lambda g: free[g])
    slots.acquire("0", need=4 << 30)  # alone on the GPU: starts whatever it needs
    started = threading.Event()

    def second() -> None:
        slots.acquire("0", need=4 << 30)
        started.set()

    t = threading.Thread(target=second, daemon=True)
    t.start()
    assert not started.wait(0.5)  # 1 GiB free, 4 GiB needed, another job running: waits
    free["0"] = 8 << 30
    with slots.cond:
        slots.cond.notify_all()
    assert started.wait(10)  # memory freed up: it starts next to the first
    third = threading.Thread(target=lambda: slots.acquire("0", need=1), daemon=True)
    third.start()
    third.join(0.5)
    assert third.is_alive()  # two per GPU at most
    slots.release("0")
    third.join(10)
    assert not third.is_alive()


# The job tells what it saw on stderr (it cannot write anywhere the test could read: its sandbox
# shows the repository read-only and no other job's directory).
RECORD = ("import json, os, sys, time; t0 = time.time(); time.sleep(1.0); "
          "print('seen', json.dumps([os.environ['CUDA_VISIBLE_DEVICES'], t0, time.time(), "
          "os.environ['OMP_NUM_THREADS'], os.environ.get('OMP_WAIT_POLICY')]), file=sys.stderr, flush=True); "
          "return x * 2")


def test_one_worker_per_gpu_each_job_sees_only_its_own_gpu(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Four (injected) GPUs, eight jobs: all four GPUs are used at once, every job sees exactly one
    GPU in CUDA_VISIBLE_DEVICES, and two jobs never overlap on one GPU (jobs_per_gpu 1). The four
    jobs running at once share the CPU cores out between them."""
    import json

    monkeypatch.delenv("OMP_WAIT_POLICY", raising=False)  # what the gate sets, not what the tests' process has
    jobs = _jobs(tmp_path, {f"k{i}": RECORD for i in range(8)})
    opts = ExecOptions(repo_root=tmp_path, gpus=("0", "1", "2", "3"), timeout_s=300,
                       health_probe=lambda g: None, free_memory=lambda g: None)
    results = execute(jobs, opts)
    assert [r.status for r in results] == [Status.PASSED] * 8, [r.reason for r in results]
    logged = [json.loads(line[5:]) for r in results for line in (r.log_tail or "").splitlines()
              if line.startswith("seen ")]
    assert {omp for *_, omp, _ in logged} == {str(max(1, (os.cpu_count() or 2) // 4))}
    assert {wait for *_, wait in logged} == {None}  # the judge's wait policy is not a sign a kernel can read
    spans = [(gpu, a, b) for gpu, a, b, _, _ in logged]
    assert len(spans) >= 8  # each case-running call of the candidate logs once
    assert {gpu for gpu, _, _ in spans} == {"0", "1", "2", "3"}
    for gpu in "0123":
        mine = sorted((a, b) for g, a, b in spans if g == gpu)
        assert all(b1 <= a2 for (_, b1), (a2, _) in zip(mine, mine[1:])), f"two jobs at once on GPU {gpu}"
    peak = max(sum(1 for _, a, b in spans if a <= t < b) for _, t, _ in spans)
    assert peak >= 2, "the GPUs' workers never ran at the same time"


def test_jobs_run_longest_first_with_sanitizer_jobs_interleaved() -> None:
    from gpu_gate.executor.scheduling import order_jobs

    def job(check: str, cost: float, name: str) -> Job:
        return Job(id=f"{check}:{name}", check=check, level="required", kernels=(), spec=None, cost=cost)

    jobs = [job("equivalence", 1, "a"), job("memcheck", 5, "b"), job("equivalence", 9, "c"),
            job("racecheck", 7, "d"), job("compile", 3, "e"), job("memcheck", 2, "f")]
    assert [j.id for j in order_jobs(jobs)] == [
        "equivalence:c", "racecheck:d", "compile:e", "memcheck:b", "equivalence:a", "memcheck:f"]


def test_fail_fast_stops_starting_jobs_after_the_first_blocking_failure(tmp_path: Path) -> None:
    jobs = _jobs(tmp_path, {"bad": "return x * 3", "b": "return x * 2", "c": "return x * 2"})
    jobs = [Job(**{**j.__dict__, "cost": float(3 - i)}) for i, j in enumerate(jobs)]  # "bad" runs first
    results = {r.job_id: r for r in execute(jobs, ExecOptions(repo_root=tmp_path, gpus=(), timeout_s=120,
                                                              workers=1, fail_fast=True))}
    assert results["equivalence:gate/bad_gate.py::bad"].status is Status.FAILED
    rest = [r for k, r in results.items() if not k.endswith("::bad")]
    assert [r.status for r in rest] == [Status.NOT_RUN] * 2
    assert all("fail_fast" in (r.reason or "") for r in rest)


def test_jobs_share_one_bytecode_directory_for_the_run_and_leave_none_behind(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Each job is a fresh interpreter: sharing bytecode saves recompiling torch where the installed
    packages carry none. The directory is the run's own, filled by the gate and read-only to the
    jobs (a job cannot plant bytecode for another), and __pycache__ never lands in the repository."""
    import json

    monkeypatch.setattr(scheduling, "installed_without_bytecode", lambda: True)
    (tmp_path / "helper.py").write_text("VALUE = 2\n")
    body = ("import json, os, sys, helper\n"
            "    try:\n        open(os.path.join(sys.pycache_prefix, 'planted.pyc'), 'w').close(); w = True\n"
            "    except OSError:\n        w = False\n"
            "    print('seen', json.dumps([sys.pycache_prefix, sys.flags.dont_write_bytecode, w]), file=sys.stderr)\n"
            "    return x * helper.VALUE")
    work = tmp_path / "work"
    work.mkdir()
    jobs = _jobs(tmp_path, {f"k{i}": body for i in range(2)})
    results = execute(jobs, ExecOptions(repo_root=tmp_path, gpus=(), timeout_s=300, workers=2, work_root=work))
    assert [r.status for r in results] == [Status.PASSED] * 2, [r.reason for r in results]
    seen = {tuple(json.loads(line[5:])) for r in results for line in (r.log_tail or "").splitlines()
            if line.startswith("seen ")}
    assert len(seen) == 1, seen
    ((prefix, no_bytecode, writable),) = seen
    assert prefix and Path(prefix).parent == work and not no_bytecode
    assert writable is False, "a job could write the run's shared bytecode"
    assert not Path(prefix).exists(), "the run's bytecode directory is removed afterwards"
    assert not list(tmp_path.rglob("__pycache__")), "no bytecode in the repository"


def test_bytecode_is_shared_only_where_the_installed_packages_lack_it(tmp_path: Path,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    import py_compile

    pkg = tmp_path / "site" / "fakepkg"
    pkg.mkdir(parents=True)
    init = pkg / "__init__.py"
    init.write_text("X = 1\n")
    monkeypatch.syspath_prepend(str(tmp_path / "site"))
    monkeypatch.setattr("sys.pycache_prefix", None)
    assert scheduling.installed_without_bytecode("fakepkg")
    py_compile.compile(str(init))
    assert not scheduling.installed_without_bytecode("fakepkg")
    assert not scheduling.installed_without_bytecode("no_such_package_here")


def test_jobs_number_gpus_as_nvidia_smi_and_the_doctor_do(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """CUDA_VISIBLE_DEVICES=2 must mean the GPU the doctor examined as GPU 2 (PCI bus order). (Under
    unshare, which keeps the machine's /dev; in bwrap the job names its GPU by UUID: test_gpu_nodes.py.)"""
    monkeypatch.delenv("CUDA_DEVICE_ORDER", raising=False)
    box = sandbox.Available("unshare", "unshare", "unshare")
    opts = ExecOptions(repo_root=tmp_path, gpus=("2",))
    env = argv._env_for(opts, "2", tmp_path, 4, "equivalence", box)
    assert env["CUDA_VISIBLE_DEVICES"] == "2" and env["CUDA_DEVICE_ORDER"] == "PCI_BUS_ID"
    assert "CUDA_DEVICE_ORDER" not in argv._env_for(opts, None, tmp_path, 4, "equivalence", box)  # CPU job
    monkeypatch.setenv("CUDA_DEVICE_ORDER", "FASTEST_FIRST")  # the runner's own choice is kept
    assert argv._env_for(opts, "2", tmp_path, 4, "equivalence", box)["CUDA_DEVICE_ORDER"] == "FASTEST_FIRST"


def test_the_judges_openmp_threads_sleep_between_regions_and_no_worker_sees_the_setting(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """libgomp's default spins after each parallel region: in the judge, which mostly waits on its workers,
    that holds a core the runner's other jobs need. The judge's OMP_WAIT_POLICY is PASSIVE; a worker's and
    the disguised replay's environment do not get it (it would be a sign of gpu-gate's process that code
    under test could read); a runner's own OMP_WAIT_POLICY is kept."""
    box = sandbox.Available("unshare", "unshare", "unshare")
    opts = ExecOptions(repo_root=tmp_path, gpus=("0",))
    monkeypatch.delenv("OMP_WAIT_POLICY", raising=False)
    for gpu, check in ((None, "equivalence"), ("0", "compile")):
        env = argv._env_for(opts, gpu, tmp_path, 2, check, box)
        assert "OMP_WAIT_POLICY" not in env
        assert argv.judge_env(env, tmp_path / "judge")["OMP_WAIT_POLICY"] == "PASSIVE"
    monkeypatch.setenv("OMP_WAIT_POLICY", "ACTIVE")
    env = argv._env_for(opts, None, tmp_path, 2, "equivalence", box)
    assert env["OMP_WAIT_POLICY"] == argv.judge_env(env, tmp_path / "judge")["OMP_WAIT_POLICY"] == "ACTIVE"


def test_a_judged_jobs_time_outside_its_judge_is_in_its_timing(tmp_path: Path) -> None:
    """The job's time that the judge's own timing cannot see: its start (files, sandboxes, processes),
    its workers' exit after the judge's, and the compiled kernels kept; and when, after the run's
    start, it began (a GPU slot's wait)."""
    jobs = _jobs(tmp_path, {"a": "return x * 2", "b": "return x * 2"})
    results = execute(jobs, ExecOptions(repo_root=tmp_path, gpus=(), timeout_s=120, workers=1))
    for r in results:
        outside = dict(r.extra.timing["outside"])
        rss = outside.pop("gate_rss_mb")  # the gate's resident memory, beside the times
        assert isinstance(rss, int) and rss > 0, rss
        assert set(outside) == {"files_s", "start_s", "disguised_s", "prepared_s", "judge_spawn_s",
                                "candidate_spawn_s", "reference_spawn_s", "workers_exit_s", "keep_s",
                                "began_s"}, outside
        assert all(isinstance(v, float) and 0 <= v < 60 for v in outside.values()), outside
        assert outside["files_s"] <= outside["start_s"]
        # the start's parts add up to it (each rounded to 0.01 s)
        parts = outside["files_s"] + outside["disguised_s"] + outside["prepared_s"] + outside["judge_spawn_s"]
        assert abs(parts - outside["start_s"]) <= 0.05, outside
    first, second = sorted(results, key=lambda r: r.extra.timing["outside"]["began_s"])
    # one worker: the second job began once the first had ended (the timing is rounded to 0.01 s)
    assert second.extra.timing["outside"]["began_s"] >= round(first.duration_s, 2) - 0.01
