"""The gpu-gate command line, end to end on real git repositories, as a user runs it."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from conftest_git import GitRepo

POLICY = """\
version: 1
kernels: {include: ["csrc/**/*.cu"]}
specs: ["gate/**/*_gate.py"]
not_run: warn
checks:
  compile: off
  determinism: off
  memcheck: off
  racecheck: off
  synccheck: off
  initcheck: off
  equivalence: {cases: 4, growth: false, shrink: false}
"""

GOOD_SPEC = """\
import torch
import gpu_gate as gg

@gg.spec(dims={"n": gg.Dim(1, 300)}, inputs={"x": gg.Tensor(("n",))}, reference=lambda x: x * 2,
         covers=["csrc/double.cu"])
def double_gate(x):
    return x * 2
"""

KERNEL = '__global__ void double_it(float* x, int n) { int i = threadIdx.x; if (i < n) x[i] *= 2.0f; }\n'


def gate(*args: str, cwd: Path, env: dict[str, str] | None = None, timeout: float = 600) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "gpu_gate.cli", *args], cwd=cwd, capture_output=True, text=True,
                          env={**os.environ, **(env or {})}, timeout=timeout)


def _repo(make_repo, spec: str = GOOD_SPEC, policy: str = POLICY) -> GitRepo:  # type: ignore[no-untyped-def]
    r = make_repo("proj", {".gpu-gate.yml": policy, "README.md": "x\n"})
    r.branch("feature")
    r.commit("kernel", {"csrc/double.cu": KERNEL, "gate/double_gate.py": spec})
    return r


def test_help_never_imports_torch() -> None:
    code = ("import sys; from gpu_gate.cli import main\n"
            "try:\n    main(['--help'])\nexcept SystemExit:\n    pass\n"
            "bad = [m for m in ('torch', 'triton', 'cupy') if m in sys.modules]\n"
            "assert not bad, bad")
    subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    r = subprocess.run([sys.executable, "-m", "gpu_gate.cli", "check", "--help"], capture_output=True, text=True)
    assert r.returncode == 0 and "--base" in r.stdout and "three-dot" in r.stdout


def test_every_subcommand_has_help() -> None:
    for cmd in ("check", "plan", "report", "validate-policy", "list-kernels", "repro", "demo", "doctor"):
        r = subprocess.run([sys.executable, "-m", "gpu_gate.cli", cmd, "--help"], capture_output=True, text=True)
        assert r.returncode == 0, cmd
        assert len(r.stdout.splitlines()) > 4, cmd


def test_check_passes_a_correct_kernel_and_writes_reports(make_repo) -> None:  # type: ignore[no-untyped-def]
    r = _repo(make_repo)
    p = gate("check", "--base", "main", cwd=r.path)
    assert p.returncode == 0, p.stdout + p.stderr
    assert "PASS    equivalence gate/double_gate.py::double_gate" in p.stdout
    out = r.path / ".gpu-gate" / "out"
    assert {f.name for f in out.iterdir()} >= {"junit.xml", "report.md", "report.sarif", "results.json"}
    results = json.loads((out / "results.json").read_text())
    assert results["results"][0]["cases"] == 4


def test_plan_runs_without_torch_and_is_deterministic_and_shardable(make_repo) -> None:  # type: ignore[no-untyped-def]
    r = _repo(make_repo, policy=POLICY.replace("memcheck: off", "memcheck: required"))
    code = ("import sys, runpy; sys.modules['torch'] = None; sys.argv = ['gpu-gate', 'plan', '--base', 'main', "
            "'--shards', '2']; from gpu_gate.cli import main; sys.exit(main())")
    p1 = subprocess.run([sys.executable, "-c", code], cwd=r.path, capture_output=True, text=True)
    p2 = subprocess.run([sys.executable, "-c", code], cwd=r.path, capture_output=True, text=True)
    assert p1.returncode == 0, p1.stderr
    assert p1.stdout == p2.stdout
    plan = json.loads(p1.stdout)
    ids = [j["id"] for j in plan["jobs"]]
    assert ids == ["equivalence:gate/double_gate.py::double_gate", "memcheck:gate/double_gate.py::double_gate"]
    assert plan["matrix"] == {"include": [{"shard": "1/2"}, {"shard": "2/2"}]}
    s1 = json.loads(gate("plan", "--base", "main", "--shard", "1/2", cwd=r.path).stdout)["jobs"]
    s2 = json.loads(gate("plan", "--base", "main", "--shard", "2/2", cwd=r.path).stdout)["jobs"]
    assert sorted(j["id"] for j in s1 + s2) == ids and not {j["id"] for j in s1} & {j["id"] for j in s2}


def test_bad_shard_is_a_usage_error(make_repo) -> None:  # type: ignore[no-untyped-def]
    r = _repo(make_repo)
    p = gate("plan", "--base", "main", "--shard", "3/2", cwd=r.path)
    assert p.returncode == 2
    assert p.stderr.strip() == "gpu-gate: error: bad --shard '3/2': need 1 <= I <= N"


def test_not_a_git_repository(tmp_path: Path) -> None:
    p = gate("check", "--base", "main", cwd=tmp_path)
    assert p.returncode == 2
    assert p.stderr.strip() == (f"gpu-gate: error: not a git repository: {tmp_path} "
                                f"(run gpu-gate inside a git checkout, or pass --repo)")


def test_unknown_base_ref(make_repo) -> None:  # type: ignore[no-untyped-def]
    r = _repo(make_repo)
    p = gate("check", "--base", "no-such-branch", cwd=r.path)
    assert p.returncode == 2
    assert p.stderr.strip() == ("gpu-gate: error: unknown git ref: no-such-branch (run `git fetch origin "
                                "no-such-branch` first, or pass --base/--head with a ref that exists)")


def test_no_base_anywhere_says_what_to_pass(make_repo) -> None:  # type: ignore[no-untyped-def]
    r = _repo(make_repo)
    env = {k: v for k, v in os.environ.items() if k != "GITHUB_EVENT_PATH"}
    p = subprocess.run([sys.executable, "-m", "gpu_gate.cli", "check"], cwd=r.path, capture_output=True, text=True,
                       env=env)
    assert p.returncode == 2
    assert p.stderr.strip() == "gpu-gate: error: no base to compare against (pass --base REF, e.g. --base origin/main)"


def test_detached_head_works(make_repo) -> None:  # type: ignore[no-untyped-def]
    r = _repo(make_repo)
    r.git("checkout", "-q", "--detach", "HEAD")
    p = gate("check", "--base", "main", cwd=r.path)
    assert p.returncode == 0, p.stdout + p.stderr


def test_empty_diff_is_green_with_no_kernel_changes(make_repo) -> None:  # type: ignore[no-untyped-def]
    r = make_repo("proj", {".gpu-gate.yml": POLICY})
    p = gate("check", "--base", "main", cwd=r.path)
    assert p.returncode == 0
    assert "no kernel changes" in p.stdout
    assert "gpu-gate: PASSED - no kernel changes" in p.stdout


def test_malformed_policy_names_file_line_and_column(make_repo) -> None:  # type: ignore[no-untyped-def]
    r = _repo(make_repo, policy="version: 1\nchecks:\n  memchek: required\n")
    p = gate("check", "--base", "main", cwd=r.path)
    assert p.returncode == 2
    assert p.stderr.startswith("gpu-gate: error: .gpu-gate.yml:3:3: ")
    assert "did you mean 'memcheck'" in p.stderr
    assert len(p.stderr.strip().splitlines()) == 1
    p = gate("validate-policy", cwd=r.path)
    assert p.returncode == 2 and ".gpu-gate.yml:3:3:" in p.stderr


def test_wrong_type_in_policy(make_repo) -> None:  # type: ignore[no-untyped-def]
    r = _repo(make_repo, policy="version: 1\nchecks:\n  equivalence: {cases: many}\n")
    p = gate("check", "--base", "main", cwd=r.path)
    assert p.returncode == 2
    assert p.stderr.strip() == ("gpu-gate: error: .gpu-gate.yml:3:24: checks.equivalence.cases: expected a whole "
                                "number, got 'many' (e.g. cases: 64)")


def test_no_policy_file_uses_the_default_and_says_so(make_repo) -> None:  # type: ignore[no-untyped-def]
    r = make_repo("proj")
    p = gate("list-kernels", "--base", "main", cwd=r.path)
    assert p.returncode == 0
    assert "no .gpu-gate.yml found: using the default preset" in p.stdout


def test_uncovered_kernel_blocks(make_repo) -> None:  # type: ignore[no-untyped-def]
    r = make_repo("proj", {".gpu-gate.yml": POLICY})
    r.branch("feature")
    r.commit("kernel", {"csrc/lonely.cu": KERNEL})
    p = gate("check", "--base", "main", cwd=r.path)
    assert p.returncode == 1
    assert "csrc/lonely.cu changed but no gate spec covers it" in p.stdout
    lk = gate("list-kernels", "--base", "main", cwd=r.path)
    assert "csrc/lonely.cu  [cuda, added]" in lk.stdout and "NOT COVERED" in lk.stdout


def test_missing_spec_glob_is_reported(make_repo) -> None:  # type: ignore[no-untyped-def]
    r = make_repo("proj", {".gpu-gate.yml": POLICY.replace("gate/**/*_gate.py", "gates/**/*_gate.py")})
    r.branch("feature")
    r.commit("kernel", {"csrc/double.cu": KERNEL, "gate/double_gate.py": GOOD_SPEC})
    p = gate("check", "--base", "main", cwd=r.path)
    assert p.returncode == 1
    assert ("no file in the repository matches the spec globs 'gates/**/*_gate.py' (fix the paths under `specs:`, "
            "or add gate specs)") in p.stdout


def test_spec_that_raises_on_import_is_a_finding_with_traceback(make_repo) -> None:  # type: ignore[no-untyped-def]
    spec = GOOD_SPEC.replace("import gpu_gate as gg\n", "import gpu_gate as gg\nraise RuntimeError('broken spec')\n")
    r = _repo(make_repo, spec=spec)
    p = gate("check", "--base", "main", cwd=r.path)
    assert p.returncode == 1
    assert ("gate/double_gate.py:3: the spec does not import: RuntimeError: broken spec (fix the spec module; run "
            "`python gate/double_gate.py` to see the error)") in p.stdout
    res = json.loads((r.path / ".gpu-gate/out/results.json").read_text())["results"][0]
    assert res["status"] == "error"
    assert "Traceback" in res["findings"][0]["details"]["traceback"]


def test_spec_whose_reference_raises(make_repo) -> None:  # type: ignore[no-untyped-def]
    spec = GOOD_SPEC.replace("reference=lambda x: x * 2", "reference=lambda x: x.no_such_method()")
    r = _repo(make_repo, spec=spec)
    p = gate("check", "--base", "main", cwd=r.path)
    assert p.returncode == 1
    assert ("the spec's reference raised AttributeError: 'Tensor' object has no attribute 'no_such_method' on case "
            "c0000 (fix the reference in gate/double_gate.py)") in p.stdout


@pytest.mark.parametrize("body,kind,text", [
    ("import os, signal; os.kill(os.getpid(), signal.SIGSEGV)", "crash",
     "the candidate's worker died on case c0000; killed by SIGSEGV"),
    ("import time; time.sleep(600)", "timeout",
     "the candidate did not return on case c0000 within the job's time budget: a hang"),
    ("import sys; sys.stderr.write('E' * (6 << 20)); sys.stderr.flush(); import os; os._exit(7)", "crash",
     "the candidate's worker died on case c0000; it exited with code 7"),
])
def test_a_crashing_or_hanging_job_is_a_finding_and_others_go_on(make_repo, body: str, kind: str, text: str) -> None:  # type: ignore[no-untyped-def]
    # Generous per-job limit except for the hang: on a loaded CI machine the harness's start-up
    # (importing torch) alone can take several seconds.
    timeout = "25" if kind == "timeout" else "100"
    bad = GOOD_SPEC.replace("def double_gate(x):\n    return x * 2", f"def double_gate(x):\n    {body}")
    r = make_repo("proj", {".gpu-gate.yml": POLICY})
    r.branch("feature")
    r.commit("kernels", {"csrc/double.cu": KERNEL, "gate/double_gate.py": bad,
                         "csrc/triple.cu": KERNEL.replace("double_it", "triple_it"),
                         "gate/triple_gate.py": GOOD_SPEC.replace("double", "triple")})
    start = time.monotonic()
    p = gate("check", "--base", "main", "--job-timeout", timeout, cwd=r.path)
    assert time.monotonic() - start < 200
    assert p.returncode == 1
    res = {x["job_id"]: x for x in json.loads((r.path / ".gpu-gate/out/results.json").read_text())["results"]}
    broken = res["equivalence:gate/double_gate.py::double_gate"]
    assert broken["status"] == "error"
    assert broken["findings"][0]["kind"] == kind
    assert broken["findings"][0]["message"].startswith(text)
    assert res["equivalence:gate/triple_gate.py::triple_gate"]["status"] == "passed"
    assert (r.path / ".gpu-gate/out/junit.xml").exists()
    if "E' * " in body:
        assert len(broken["log_tail"]) < 300_000


def test_job_environment_is_scrubbed(make_repo) -> None:  # type: ignore[no-untyped-def]
    spec = GOOD_SPEC.replace("def double_gate(x):\n    return x * 2",
                             "def double_gate(x):\n    import os\n"
                             "    assert 'GITHUB_TOKEN' not in os.environ and 'MY_SECRET' not in os.environ, 'leak'\n"
                             "    return x * 2")
    r = _repo(make_repo, spec=spec)
    p = gate("check", "--base", "main", cwd=r.path, env={"GITHUB_TOKEN": "ghs_x", "MY_SECRET": "s"})
    assert p.returncode == 0, p.stdout


def test_ten_thousand_changed_files(make_repo) -> None:  # type: ignore[no-untyped-def]
    r = make_repo("proj", {".gpu-gate.yml": POLICY})
    r.branch("feature")
    files = {f"data/f{i:05d}.txt": f"{i}\n" for i in range(10_000)}
    files["csrc/double.cu"] = KERNEL
    files["gate/double_gate.py"] = GOOD_SPEC
    r.commit("many", files)
    start = time.monotonic()
    p = gate("plan", "--base", "main", cwd=r.path)
    assert p.returncode == 0, p.stderr
    assert time.monotonic() - start < 30
    assert [k["path"] for k in json.loads(p.stdout)["kernels"]] == ["csrc/double.cu"]


def test_report_merges_shards_and_a_lost_shard_fails(make_repo) -> None:  # type: ignore[no-untyped-def]
    r = _repo(make_repo, policy=POLICY.replace("initcheck: off", "initcheck: advisory"))
    plan = r.path / "plan.json"
    assert gate("plan", "--base", "main", "--output", str(plan), cwd=r.path).returncode == 0
    p1 = gate("check", "--plan", str(plan), "--shard", "1/2", "--out", "s1", cwd=r.path)
    assert p1.returncode in (0, 1), p1.stderr
    only_one = gate("report", "s1/results.json", "--expect-plan", str(plan), "--out", "merged", "--no-github",
                    cwd=r.path)
    assert only_one.returncode == 1
    assert "produced no result" in only_one.stdout
    p2 = gate("check", "--plan", str(plan), "--shard", "2/2", "--out", "s2", cwd=r.path)
    both = gate("report", "s1/results.json", "s2/results.json", "--expect-plan", str(plan), "--out", "merged",
                "--no-github", cwd=r.path)
    assert both.returncode == 0, both.stdout + p2.stdout
    missing = gate("report", "nope/results.json", cwd=r.path)
    assert missing.returncode == 2
    assert missing.stderr.strip() == ("gpu-gate: error: nope/results.json: no such results file (pass the "
                                      "results.json files the check shards wrote)")


def test_second_run_on_an_unchanged_kernel_is_served_from_the_cache(make_repo) -> None:  # type: ignore[no-untyped-def]
    r = _repo(make_repo)
    first = gate("check", "--base", "main", cwd=r.path)
    assert first.returncode == 0 and "(1 cached)" not in first.stdout
    second = gate("check", "--base", "main", cwd=r.path)
    assert second.returncode == 0
    assert "running 0 jobs (1 cached)" in second.stdout
    head = r.git("rev-parse", "HEAD")
    assert f"cached from {head[:12]}" in second.stdout
    # one byte of the kernel changes: the cache misses
    r.commit("tweak", {"csrc/double.cu": KERNEL + "static const int tweak = 1;\n"})
    third = gate("check", "--base", "main", cwd=r.path)
    assert "running 1 jobs" in third.stdout


def test_a_run_served_from_the_cache_does_not_prepare_for_jobs(make_repo, monkeypatch: pytest.MonkeyPatch) -> None:  # type: ignore[no-untyped-def]
    """Filling the run's shared bytecode imports torch (seconds where torch has none): a run whose
    jobs all come from the cache skips it."""
    import contextlib

    from gpu_gate import cli
    from gpu_gate.executor import scheduling

    r = _repo(make_repo)
    assert gate("check", "--base", "main", cwd=r.path).returncode == 0
    filled: list[object] = []

    @contextlib.contextmanager
    def recording(work_root: object = None, store: object = None):  # type: ignore[no-untyped-def]
        filled.append(work_root)
        yield None

    monkeypatch.setattr(scheduling, "shared_bytecode", recording)
    monkeypatch.chdir(r.path)
    with contextlib.suppress(SystemExit):
        cli.main(["check", "--base", "main"])
    assert filled == []
    r.commit("tweak", {"csrc/double.cu": KERNEL + "static const int tweak = 1;\n"})  # a job to run: now it is prepared
    with contextlib.suppress(SystemExit):
        cli.main(["check", "--base", "main"])
    assert filled


def _has_nvidia_driver() -> bool:
    import ctypes

    try:
        ctypes.CDLL("libnvidia-ml.so.1")
    except OSError:
        return False
    return True


@pytest.mark.skipif(_has_nvidia_driver(), reason="this machine has the NVIDIA driver; tests/gpu covers it")
def test_an_unfit_gpu_runner_starts_no_job_and_fails_closed(make_repo, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    """A runner told it has GPU 0 where NVML sees none: the doctor fails it before any job starts."""
    marker = tmp_path / "imported"
    spec = GOOD_SPEC.replace("import torch\n", f"import torch\nopen({str(marker)!r}, 'w').close()\n")
    r = _repo(make_repo, spec=spec)
    p = gate("check", "--base", "main", "--no-cache", cwd=r.path, env={"CUDA_VISIBLE_DEVICES": "0"})
    assert p.returncode == 1, p.stdout + p.stderr
    assert "doctor: this runner is unfit" in p.stdout and "not running 1 jobs on 1 GPU(s)" in p.stdout
    assert not marker.exists(), "a job ran on a GPU the doctor did not trust"
    results = json.loads((r.path / ".gpu-gate/out/results.json").read_text())
    blocking = [f for f in results["plan_findings"] if f["check"] == "doctor"]
    assert blocking and blocking[0]["kind"] == "infrastructure" and "no NVIDIA GPU" in blocking[0]["message"]
    job = results["results"][0]
    assert job["status"] == "not_run" and "health check" in job["reason"]


def test_a_runner_needs_only_the_tools_its_jobs_use() -> None:
    from gpu_gate.commands.vet import tools_needed
    from gpu_gate.protocol.jobs import Job, SpecRef

    def job(check: str, *kernels: str) -> Job:
        return Job(id=f"{check}:{kernels}", check=check, level="required", kernels=kernels,
                   spec=SpecRef("gate/k_gate.py", "k_gate"))

    assert tools_needed([job("equivalence", "mylib/kernels.py")]) == ("torch", "triton")
    assert tools_needed([job("equivalence", "csrc/add.cu"), job("memcheck", "csrc/add.cu")]) == (
        "torch", "compute-sanitizer", "cupy")
    assert tools_needed([job("compile", "csrc/add.cuh")]) == ("torch", "cupy", "nvcc")


def test_the_policys_health_limits_reach_the_doctor(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                    capsys: pytest.CaptureFixture[str]) -> None:
    from gpu_gate.commands import doctor, vet
    from gpu_gate.protocol.jobs import Job, SpecRef
    from gpu_gate.policy import load_policy

    (tmp_path / ".gpu-gate.yml").write_text("runner:\n  health: {max_temperature_c: 70, allow_other_processes: true}\n")
    policy = load_policy(tmp_path).policy
    seen: dict[str, object] = {}

    def fake_doctor(**kwargs: object) -> doctor.DoctorReport:
        seen.update(kwargs)
        gpu = doctor.GpuHealth(index=0, name="NVIDIA H100", uuid=None, memory_total_mib=None, memory_free_mib=None,
                               temperature_c=None, throttle_reasons=[], ecc_uncorrected={}, retired_pages={},
                               row_remap={}, processes=None, unsupported=[], problems=[], cuda_id="0")
        return doctor.DoctorReport(True, [gpu], {}, [], [])

    monkeypatch.setattr(doctor, "run_doctor", fake_doctor)
    job = Job(id="e", check="equivalence", level="required", kernels=("k/k.py",), spec=SpecRef("g_gate.py", "g"))
    verdict = vet.vet_runner(("0",), None, policy, [job])
    t = seen["thresholds"]
    assert isinstance(t, doctor.Thresholds)
    assert (t.max_temperature_c, t.allow_other_processes, t.required_tools) == (70, True, ("torch", "triton"))
    assert seen["visible"] == ("0",) and verdict.usable == ["0"]
    assert "doctor: 1 GPU(s) healthy (NVIDIA H100)" in capsys.readouterr().out


def test_doctor_takes_its_limits_from_the_repositorys_policy(make_repo, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    r = make_repo("proj", {".gpu-gate.yml": "runner:\n  health: {max_temperature_c: 70}\n", "README.md": "x\n"})
    inside = gate("doctor", cwd=r.path)
    assert "limits: runner.health of .gpu-gate.yml" in inside.stdout, inside.stdout + inside.stderr
    outside = tmp_path / "elsewhere"
    outside.mkdir()
    assert "limits: gpu-gate's defaults" in gate("doctor", cwd=outside).stdout
    as_json = json.loads(gate("doctor", "--json", cwd=r.path).stdout)
    assert as_json["limits_from"] == ".gpu-gate.yml"
    (tmp_path / "bad.yml").write_text("runner:\n  health: {max_temperature_c: hot}\n")
    bad = gate("doctor", "--policy", str(tmp_path / "bad.yml"), cwd=outside)
    assert bad.returncode == 2 and "runner.health.max_temperature_c" in bad.stderr, bad.stderr


def test_head_that_is_not_checked_out_runs_from_its_own_tree(make_repo) -> None:  # type: ignore[no-untyped-def]
    bad = GOOD_SPEC.replace("return x * 2", "return x * 3")
    r = _repo(make_repo, spec=bad)
    r.checkout("main")  # the work tree is at main; the buggy spec exists only on feature
    p = gate("check", "--base", "main", "--head", "feature", "--no-cache", cwd=r.path)
    assert p.returncode == 1, p.stdout + p.stderr
    assert "the workers run an export of the commit, not the work tree" in p.stdout
    assert "FAIL    equivalence gate/double_gate.py::double_gate" in p.stdout
    assert r.git("worktree", "list").count("\n") == 0  # the temporary work tree is gone


@pytest.fixture
def full_fs(tmp_path: Path):  # type: ignore[no-untyped-def]
    """A real, full filesystem: a 64 KiB tmpfs filled to the last block (needs root to mount)."""
    mnt = tmp_path / "full"
    mnt.mkdir()
    if subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64k", "tmpfs", str(mnt)], capture_output=True).returncode:
        pytest.skip("mounting a tmpfs needs root: cannot build a full filesystem here")
    try:
        fd = os.open(mnt / "filler", os.O_WRONLY | os.O_CREAT)
        try:
            while os.write(fd, b"x" * 4096):
                pass
        except OSError:
            pass  # ENOSPC: the filesystem is full
        finally:
            os.close(fd)
        yield mnt
    finally:
        subprocess.run(["umount", "-l", str(mnt)], capture_output=True)


def test_full_temporary_directory_is_an_infrastructure_finding(make_repo, full_fs: Path) -> None:  # type: ignore[no-untyped-def]
    r = _repo(make_repo)
    p = gate("check", "--base", "main", "--no-cache", "--work-dir", str(full_fs), cwd=r.path)
    assert p.returncode == 1, p.stdout + p.stderr
    res = json.loads((r.path / ".gpu-gate/out/results.json").read_text())["results"][0]
    assert res["status"] == "error"
    assert res["findings"][0]["kind"] == "infrastructure"
    assert "no disk space left?" in res["findings"][0]["message"] or "No space left" in res["findings"][0]["message"]


def test_no_disk_left_for_reports_fails_closed(make_repo, full_fs: Path) -> None:  # type: ignore[no-untyped-def]
    r = _repo(make_repo)
    p = gate("check", "--base", "main", "--no-cache", "--out", str(full_fs / "out"), cwd=r.path)
    assert p.returncode == 3
    assert "gpu-gate: PASSED" in p.stdout  # the verdict is still shown
    assert "gpu-gate: error: cannot write report" in p.stderr and "No space left on device" in p.stderr


def test_a_runner_the_doctor_fails_beside_the_first_jobs_keeps_no_result(
        make_repo, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:  # type: ignore[no-untyped-def]
    """On one GPU the tools' probes run beside the first jobs (seconds saved on every run). When
    they find the runner unfit after a job has started, the jobs are stopped and every one is
    reported not run: nothing that ran on an unfit runner is judged or cached."""
    import contextlib
    import json as _json

    from gpu_gate import cli
    from gpu_gate.commands import doctor
    from gpu_gate.executor import slots

    work = tmp_path / "work"  # the jobs' directories: a job's appears as it starts
    work.mkdir()
    r = _repo(make_repo)
    healthy = doctor.GpuHealth(0, "Test GPU", None, 80000, 79000, 40, [], {}, {}, {}, [], [], [], cuda_id="0")
    monkeypatch.setattr(slots, "detect_gpus", lambda: ("0",))
    monkeypatch.setattr(doctor, "examine_gpus", lambda **_: doctor.GpuExam(doctor.Thresholds(), [], [], [healthy],
                                                                           "580", "13.0", 1, ["0"]))

    def late_probe(exam: doctor.GpuExam, **_: object) -> doctor.DoctorReport:
        for _ in range(600):  # the tools' probe answers once a job has started
            if list(work.rglob("in.json")):
                started.append(True)
                break
            time.sleep(0.1)
        return doctor.DoctorReport(True, exam.gpus, {}, ["compute-sanitizer not found (install the CUDA toolkit)"],
                                   [], "580", "13.0", 1, ["0"])

    started: list[bool] = []
    monkeypatch.setattr(doctor, "complete", late_probe)
    monkeypatch.chdir(r.path)
    with contextlib.suppress(SystemExit):
        cli.main(["check", "--base", "main", "--cache-dir", str(tmp_path / "cache"), "--work-dir", str(work)])
    assert started, "no job started beside the doctor"
    results = _json.loads((r.path / ".gpu-gate/out/results.json").read_text())
    assert all(j["status"] == "not_run" and "health check" in j["reason"] for j in results["results"])
    blocking = [f for f in results["plan_findings"] if f["check"] == "doctor"]
    assert blocking and "compute-sanitizer not found" in blocking[0]["message"]
    assert not [f for f in results["plan_findings"] if f["kind"] == "interrupted"]
    assert not list((tmp_path / "cache").rglob("*.json")) or not any(
        "passed" in p.read_text() for p in (tmp_path / "cache").rglob("*.json"))
