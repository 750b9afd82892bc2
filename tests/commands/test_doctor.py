from __future__ import annotations

import ctypes
import dataclasses
import json
import os
import shutil
import stat
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from gpu_gate.commands import doctor
from gpu_gate import nvml
from gpu_gate.health import tools as tools_module
from gpu_gate.commands.doctor import Thresholds, ToolInfo, doctor_main, infrastructure_findings, run_doctor
from gpu_gate.findings import Severity

GIB = 1024**3
MIB = 1024**2
NOT_SUPPORTED, GPU_IS_LOST = 3, 15


def has_nvml_library() -> bool:
    try:
        ctypes.CDLL("libnvidia-ml.so.1")
    except OSError:
        return False
    return True


class FakeNVMLError(Exception):
    def __init__(self, value: int) -> None:
        self.value = value
        super().__init__({3: "Not Supported", 9: "Driver Not Loaded", 12: "NVML Shared Library Not Found",
                          15: "GPU is lost"}.get(value, f"Unknown Error {value}"))


@dataclasses.dataclass
class FakeGpu:
    """What a healthy, idle H100 reports (values as NVML returns them)."""

    name: str = "NVIDIA H100 80GB HBM3"
    uuid: str = "GPU-5c0ffee0-1111-2222-3333-444455556666"
    total: int = 81559 * 1024 * 1024
    free: int = 81080 * 1024 * 1024
    temperature: int = 34
    throttle: int = 0x1  # gpu_idle
    ecc_volatile: int = 0
    ecc_aggregate: int = 0
    retired_pending: int = 0
    remap: tuple[int, int, int, int] = (0, 0, 0, 0)
    processes: list[Any] = dataclasses.field(default_factory=list)
    # Hopper repairs memory by row remapping; page retirement is not supported there.
    raises: dict[str, int] = dataclasses.field(
        default_factory=lambda: {"nvmlDeviceGetRetiredPages": NOT_SUPPORTED,
                                 "nvmlDeviceGetRetiredPagesPendingStatus": NOT_SUPPORTED})


class FakeNvml:
    NVMLError = FakeNVMLError

    def __init__(self, gpus: list[FakeGpu], init_error: int | None = None, driver: str = "580.159.04") -> None:
        self.gpus = gpus
        self.init_error = init_error
        self.driver = driver
        self.shutdowns = 0

    def nvmlInit(self) -> None:
        if self.init_error is not None:
            raise FakeNVMLError(self.init_error)

    def nvmlShutdown(self) -> None:
        self.shutdowns += 1

    def nvmlSystemGetDriverVersion(self) -> str:
        return self.driver

    def nvmlSystemGetCudaDriverVersion(self) -> int:
        return 13000

    def nvmlDeviceGetCount(self) -> int:
        return len(self.gpus)

    def nvmlDeviceGetHandleByIndex(self, i: int) -> FakeGpu:
        return self.gpus[i]

    def _check(self, g: FakeGpu, fn: str) -> None:
        if fn in g.raises:
            raise FakeNVMLError(g.raises[fn])

    def nvmlDeviceGetName(self, g: FakeGpu) -> str:
        self._check(g, "nvmlDeviceGetName")
        return g.name

    def nvmlDeviceGetUUID(self, g: FakeGpu) -> str:
        return g.uuid

    def nvmlDeviceGetMemoryInfo(self, g: FakeGpu) -> SimpleNamespace:
        self._check(g, "nvmlDeviceGetMemoryInfo")
        return SimpleNamespace(total=g.total, free=g.free, used=g.total - g.free)

    def nvmlDeviceGetTemperature(self, g: FakeGpu, sensor: int) -> int:
        assert sensor == 0
        self._check(g, "nvmlDeviceGetTemperature")
        return g.temperature

    def nvmlDeviceGetCurrentClocksEventReasons(self, g: FakeGpu) -> int:
        self._check(g, "nvmlDeviceGetCurrentClocksEventReasons")
        return g.throttle

    def nvmlDeviceGetTotalEccErrors(self, g: FakeGpu, error_type: int, counter: int) -> int:
        self._check(g, "nvmlDeviceGetTotalEccErrors")
        assert error_type == 1, "only uncorrectable errors are asked for"
        return g.ecc_volatile if counter == 0 else g.ecc_aggregate

    def nvmlDeviceGetRetiredPages(self, g: FakeGpu, cause: int) -> list[int]:
        self._check(g, "nvmlDeviceGetRetiredPages")
        return [0x1000, 0x2000] if cause == 1 else []

    def nvmlDeviceGetRetiredPagesPendingStatus(self, g: FakeGpu) -> int:
        self._check(g, "nvmlDeviceGetRetiredPagesPendingStatus")
        return g.retired_pending

    def nvmlDeviceGetRemappedRows(self, g: FakeGpu) -> tuple[int, int, int, int]:
        self._check(g, "nvmlDeviceGetRemappedRows")
        return g.remap

    def nvmlDeviceGetComputeRunningProcesses(self, g: FakeGpu) -> list[Any]:
        self._check(g, "nvmlDeviceGetComputeRunningProcesses")
        return g.processes

    def nvmlSystemGetProcessName(self, pid: int) -> bytes:
        return b"python3"


def healthy_tools(has_gpu: bool, t: Thresholds) -> dict[str, ToolInfo]:
    return {
        "compute-sanitizer": ToolInfo("compute-sanitizer", "2025.3.1.0", "/opt/cuda/bin/compute-sanitizer"),
        "nvcc": ToolInfo("nvcc", "13.0.88", "/opt/cuda/bin/nvcc"),
        "torch": ToolInfo("torch", "2.11.0+cu130", cuda_works=True, detail="CUDA works on NVIDIA H100"),
        "triton": ToolInfo("triton", "3.6.0"),
        "cupy": ToolInfo("cupy", "14.2.0", cuda_works=True, detail="CUDA works on NVIDIA H100"),
    }


@pytest.fixture(autouse=True)
def every_gpu_visible(monkeypatch: pytest.MonkeyPatch) -> None:
    """The doctor follows CUDA_VISIBLE_DEVICES; these tests set it themselves where it matters."""
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)


def doc(*gpus: FakeGpu, thresholds: Thresholds | None = None) -> doctor.DoctorReport:
    return run_doctor(thresholds=thresholds, nvml_lib=FakeNvml(list(gpus)), tool_probe=healthy_tools)


def only_problem(report: doctor.DoctorReport) -> str:
    assert len(report.problems) == 1, report.problems
    return report.problems[0]


# --- a healthy GPU --------------------------------------------------------------------------


def test_healthy_h100_has_no_problems() -> None:
    report = doc(FakeGpu())
    assert report.healthy and report.has_gpu
    assert report.driver_version == "580.159.04" and report.cuda_driver_version == "13.0"
    g = report.gpus[0]
    assert g.name == "NVIDIA H100 80GB HBM3"
    assert (g.memory_total_mib, g.memory_free_mib) == (81559, 81080)
    assert g.throttle_reasons == ["gpu_idle"]
    assert g.processes == []
    assert g.retired_pages == {"sbe": None, "dbe": None, "pending": None}
    assert g.row_remap == {"correctable": 0, "uncorrectable": 0, "pending": False, "failure": False}
    assert report.notes == ["GPU 0 (NVIDIA H100 80GB HBM3): not supported by this GPU or driver: retired pages, "
                            "retired pages pending"]


def test_healthy_report_prints_and_exits_zero(capsys: pytest.CaptureFixture[str]) -> None:
    rc = doctor_main(False, nvml_lib=FakeNvml([FakeGpu()]), tool_probe=healthy_tools)
    out = capsys.readouterr().out
    assert rc == 0
    assert "GPU 0: NVIDIA H100 80GB HBM3" in out
    assert "81080 MiB free of 81559 MiB" in out
    assert "compute-sanitizer  2025.3.1.0" in out
    assert out.rstrip().endswith("healthy: this machine is fit to run gpu-gate")


def test_nvml_is_shut_down_after_reading() -> None:
    lib = FakeNvml([FakeGpu()])
    run_doctor(nvml_lib=lib, tool_probe=healthy_tools)
    assert lib.shutdowns == 1


# --- GPU problems ---------------------------------------------------------------------------


def test_volatile_uncorrectable_ecc_is_a_problem() -> None:
    msg = only_problem(doc(FakeGpu(ecc_volatile=2, ecc_aggregate=2)))
    assert msg == ("GPU 0 (NVIDIA H100 80GB HBM3): 2 uncorrectable ECC error(s) since the driver loaded "
                   "(drain the node and reset the GPU)")


def test_aggregate_ecc_is_a_note_unless_a_threshold_is_set() -> None:
    report = doc(FakeGpu(ecc_aggregate=5))
    assert report.healthy
    assert any("5 uncorrectable ECC error(s) over the GPU's life" in n for n in report.notes)
    strict = doc(FakeGpu(ecc_aggregate=5), thresholds=Thresholds(max_aggregate_uncorrected_ecc=0))
    assert "5 uncorrectable ECC error(s) over the GPU's life, more than 0 allowed" in only_problem(strict)


def test_hardware_slowdown_is_a_problem_with_decoded_names() -> None:
    msg = only_problem(doc(FakeGpu(throttle=0x1 | 0x8 | 0x40 | 0x80)))
    assert "hw_slowdown, hw_thermal_slowdown, hw_power_brake_slowdown" in msg
    assert "gpu_idle" not in msg


def test_idle_app_clocks_power_cap_and_sync_boost_are_not_problems() -> None:
    report = doc(FakeGpu(throttle=0x1 | 0x2 | 0x4 | 0x10))
    assert report.healthy
    assert report.gpus[0].throttle_reasons == ["gpu_idle", "applications_clocks_setting", "sw_power_cap", "sync_boost"]


def test_decode_throttle_names_unknown_bits() -> None:
    assert nvml.decode_throttle(0) == []
    assert nvml.decode_throttle(0x20 | 0x10000) == ["sw_thermal_slowdown", "unknown(0x10000)"]


def test_throttle_falls_back_to_the_older_nvml_name() -> None:
    class OldNvml(FakeNvml):
        nvmlDeviceGetCurrentClocksEventReasons = None  # type: ignore[assignment]

        def nvmlDeviceGetCurrentClocksThrottleReasons(self, g: FakeGpu) -> int:
            return 0x40

    report = run_doctor(nvml_lib=OldNvml([FakeGpu()]), tool_probe=healthy_tools)
    assert report.gpus[0].throttle_reasons == ["hw_thermal_slowdown"]
    assert not report.healthy


def test_another_process_holding_memory_is_a_problem() -> None:
    procs = [SimpleNamespace(pid=4242, usedGpuMemory=2 * GIB), SimpleNamespace(pid=os.getpid(), usedGpuMemory=GIB)]
    report = doc(FakeGpu(processes=procs))
    assert only_problem(report) == (
        "GPU 0 (NVIDIA H100 80GB HBM3): another process holds GPU memory: pid 4242 (python3), 2048 MiB; "
        "the GPU must be free for a gate run"
    )
    assert report.gpus[0].processes == [{"pid": 4242, "name": "python3", "used_memory_mib": 2048}]


def test_the_process_that_started_the_gate_is_not_another_process(tmp_path: Path) -> None:
    """A test or a script that used the GPU and then runs gpu-gate waits for it: its memory is not
    a busy GPU (the free memory is still checked); any other process still is."""
    import subprocess
    import sys

    # a real chain: this process started a child that started a grandchild; the grandchild's ancestors
    code = "import json, sys; from gpu_gate import nvml; print(json.dumps(sorted(nvml.ancestors())))"
    out = subprocess.run([sys.executable, "-c", f"import subprocess, sys; subprocess.run([sys.executable, '-c', {code!r}])"],
                         capture_output=True, text=True, env={**os.environ, "PYTHONPATH": str(Path(__file__).parents[2])})
    chain = json.loads(out.stdout)
    assert os.getpid() in chain and 1 not in chain, out
    procs = [SimpleNamespace(pid=os.getppid(), usedGpuMemory=2 * GIB), SimpleNamespace(pid=4242, usedGpuMemory=GIB)]
    report = doc(FakeGpu(processes=procs))
    assert only_problem(report).startswith("GPU 0 (NVIDIA H100 80GB HBM3): another process holds GPU memory: pid 4242")
    assert any(n.startswith(f"GPU 0 (NVIDIA H100 80GB HBM3): pid {os.getppid()} (python3), which started gpu-gate")
               for n in report.notes), report.notes
    alone = doc(FakeGpu(processes=procs[:1]))
    assert alone.healthy, alone.gpus[0].problems
    assert alone.gpus[0].processes == [{"pid": os.getppid(), "name": "python3", "used_memory_mib": 2048,
                                        "started_the_gate": True}]


def _another_gate(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[Any, int]:
    """Another gate on this runner (listed there, in a runner directory of the test's own) and the
    pid of its job, a child of it that stands for a process holding GPU memory. The gate ends, and
    kills its job, when its stdin is closed."""
    import subprocess
    import sys

    from gpu_gate.executor import reservations

    monkeypatch.setenv(reservations.ENV, str(tmp_path / "runner"))
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).parents[2])}
    gate_code = ("import subprocess, sys; from gpu_gate.executor.reservations import gate_on_runner\n"
                 "with gate_on_runner():\n"
                 "    job = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(60)'])\n"
                 "    print(job.pid, flush=True); sys.stdin.read(); job.kill()\n")
    gate = subprocess.Popen([sys.executable, "-c", gate_code], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            text=True, env=env)
    assert gate.stdout is not None
    return gate, int(gate.stdout.readline())


def test_another_gates_jobs_on_the_gpu_are_not_a_strangers_processes(tmp_path: Path,
                                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    """Two gates on one GPU share its memory by reservation: the first gate's job is no reason for the
    second gate's doctor to call the GPU busy (on two H200s, a pair of honest gates had one red "the
    runner failed its health check" from exactly that). A process no gate started is still a
    problem, and so is one whose listed gate is an id reused by a process started later."""
    import subprocess
    import sys

    from gpu_gate.executor import reservations

    gate, job = _another_gate(tmp_path, monkeypatch)
    stranger = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        shared = doc(FakeGpu(processes=[SimpleNamespace(pid=job, usedGpuMemory=2 * GIB)]))
        assert shared.healthy, shared.gpus[0].problems
        assert shared.gpus[0].processes == [{"pid": job, "name": "python3", "used_memory_mib": 2048,
                                             "another_gate": gate.pid}]
        assert any(f"started by another gpu-gate run on this runner (pid {gate.pid})" in n for n in shared.notes)

        both = doc(FakeGpu(processes=[SimpleNamespace(pid=job, usedGpuMemory=GIB),
                                      SimpleNamespace(pid=stranger.pid, usedGpuMemory=GIB)]))
        assert only_problem(both).startswith(f"GPU 0 (NVIDIA H100 80GB HBM3): another process holds GPU memory: "
                                             f"pid {stranger.pid}")

        # a listing that names the stranger's id with another start time (an id reused since): dropped
        forged = tmp_path / "runner" / reservations.GATES / f"{stranger.pid}-1-forged"
        forged.touch()
        again = doc(FakeGpu(processes=[SimpleNamespace(pid=stranger.pid, usedGpuMemory=GIB)]))
        assert not again.healthy and not forged.exists()
    finally:
        stranger.kill()
        assert gate.stdin is not None
        gate.stdin.close()
        gate.wait(timeout=30)
    assert not list((tmp_path / "runner" / reservations.GATES).iterdir()), "a gate leaves the list when it ends"
    after = doc(FakeGpu(processes=[SimpleNamespace(pid=4242, usedGpuMemory=GIB)]))
    assert not after.healthy


def test_memory_another_gate_holds_for_a_while_does_not_leave_the_gpu_out(tmp_path: Path,
                                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    """Two gates on one GPU: the first gate's job holds nearly all the GPU's memory for a large case
    when the second gate's doctor looks. Its memory is shared by reservation (the second gate's jobs
    wait for it), so the GPU is not left out for want of free memory (which would leave the second
    gate's GPU jobs not run, and the gate red for nothing its change did). A stranger holding the
    same memory still leaves the GPU out, and so does too little memory when the other gate's share
    does not make up for it."""
    gate, job = _another_gate(tmp_path, monkeypatch)
    try:
        full = 81000 * MIB
        busy = doc(FakeGpu(free=80 * MIB, processes=[SimpleNamespace(pid=job, usedGpuMemory=full)]))
        assert busy.healthy, busy.gpus[0].problems
        unknown = doc(FakeGpu(free=80 * MIB, processes=[SimpleNamespace(pid=job, usedGpuMemory=None)]))
        assert unknown.healthy, unknown.gpus[0].problems  # what it holds is unknown: its reservation says
        # the other gate holds little: the memory is short for another reason
        short = doc(FakeGpu(free=80 * MIB, processes=[SimpleNamespace(pid=job, usedGpuMemory=100 * MIB)]))
        assert only_problem(short).endswith("only 80 MiB of 81559 MiB memory free (need 1024)")
        # a stranger holding it: left out, as before (for the memory and for the stranger)
        stranger = doc(FakeGpu(free=80 * MIB, processes=[SimpleNamespace(pid=4242, usedGpuMemory=full)]),
                       thresholds=Thresholds(allow_other_processes=True))
        assert only_problem(stranger).endswith("only 80 MiB of 81559 MiB memory free (need 1024)")
    finally:
        assert gate.stdin is not None
        gate.stdin.close()
        gate.wait(timeout=30)


def test_other_processes_can_be_allowed() -> None:
    procs = [SimpleNamespace(pid=4242, usedGpuMemory=None)]
    report = doc(FakeGpu(processes=procs), thresholds=Thresholds(allow_other_processes=True))
    assert report.healthy
    assert any("1 other compute process(es)" in n for n in report.notes)


def test_row_remap_pending_and_failure_are_problems() -> None:
    pending = only_problem(doc(FakeGpu(remap=(0, 1, 1, 0))))
    assert pending.endswith("a row remap is pending (reset the GPU to apply it)")
    failed = doc(FakeGpu(remap=(3, 8, 0, 1)))
    assert only_problem(failed).endswith("row remapping failed: the GPU's memory cannot be repaired (the GPU needs service)")
    assert failed.gpus[0].row_remap == {"correctable": 3, "uncorrectable": 8, "pending": False, "failure": True}


def test_pending_page_retirement_on_an_older_gpu_is_a_problem() -> None:
    v100 = FakeGpu(name="Tesla V100-SXM2-32GB", retired_pending=1, raises={"nvmlDeviceGetRemappedRows": NOT_SUPPORTED})
    report = doc(v100)
    assert only_problem(report) == ("GPU 0 (Tesla V100-SXM2-32GB): a page retirement is pending "
                                    "(reset the GPU or reboot to apply it)")
    assert report.gpus[0].retired_pages == {"sbe": 0, "dbe": 2, "pending": True}


def test_hot_gpu_and_full_memory_are_problems() -> None:
    report = doc(FakeGpu(temperature=92, free=512 * 1024 * 1024))
    assert len(report.problems) == 2
    assert "only 512 MiB of 81559 MiB memory free (need 1024)" in report.problems[0]
    assert "temperature 92 C is above 85 C" in report.problems[1]


def test_a_failing_query_is_a_problem_not_a_pass() -> None:
    report = doc(FakeGpu(raises={"nvmlDeviceGetTotalEccErrors": GPU_IS_LOST}))
    assert report.problems == [
        "GPU 0 (NVIDIA H100 80GB HBM3): could not read ecc (volatile) (GPU is lost)",
        "GPU 0 (NVIDIA H100 80GB HBM3): could not read ecc (aggregate) (GPU is lost)",
    ]


def test_each_gpu_is_judged_separately() -> None:
    report = doc(FakeGpu(), FakeGpu(ecc_volatile=1))
    assert len(report.gpus) == 2
    assert only_problem(report).startswith("GPU 1 (NVIDIA H100 80GB HBM3): 1 uncorrectable")


# --- no GPU ---------------------------------------------------------------------------------


def test_library_not_found_says_so_clearly() -> None:
    report = run_doctor(nvml_lib=FakeNvml([], init_error=12), tool_probe=healthy_tools)
    assert not report.has_gpu and report.gpus == []
    assert only_problem(report).startswith("no NVIDIA GPU: NVML library not found (NVML Shared Library Not Found")


def test_driver_not_loaded_and_zero_gpus() -> None:
    unloaded = run_doctor(nvml_lib=FakeNvml([], init_error=9), tool_probe=healthy_tools)
    assert only_problem(unloaded).startswith("no NVIDIA GPU: the NVIDIA kernel driver is not loaded")
    empty = run_doctor(nvml_lib=FakeNvml([]), tool_probe=healthy_tools)
    assert only_problem(empty).startswith("no NVIDIA GPU: the driver is loaded but NVML sees no GPU")


@pytest.mark.skipif(has_nvml_library(), reason="this machine has the NVIDIA driver; tests/gpu covers it")
def test_real_nvml_on_a_machine_without_gpu(capsys: pytest.CaptureFixture[str]) -> None:
    rc = doctor_main(False)
    out = capsys.readouterr().out
    assert rc == 1
    assert "no NVIDIA GPU: NVML library not found (" in out
    assert out.rstrip().splitlines()[-2] == "NOT FIT: 1 problem(s):"


@pytest.mark.skipif(has_nvml_library(), reason="this machine has the NVIDIA driver; tests/gpu covers it")
def test_real_nvml_json_output(capsys: pytest.CaptureFixture[str]) -> None:
    rc = doctor_main(True)
    data = json.loads(capsys.readouterr().out)
    assert rc == 1
    assert data["healthy"] is False and data["has_gpu"] is False
    assert data["problems"][0].startswith("no NVIDIA GPU: NVML library not found (")
    assert data["tools"]["torch"]["detail"] == "CUDA not probed: no GPU"


def test_findings_for_check_one_per_problem() -> None:
    report = doc(FakeGpu(ecc_volatile=1, remap=(0, 1, 1, 0)))
    findings = infrastructure_findings(report)
    assert [f.message for f in findings] == report.problems and len(findings) == 2
    assert all(f.check == "doctor" and f.kind == "infrastructure" and f.severity is Severity.ERROR for f in findings)
    assert infrastructure_findings(doc(FakeGpu())) == []


# --- tools ----------------------------------------------------------------------------------


def test_missing_required_tool_is_a_problem_on_a_gpu_runner() -> None:
    def no_sanitizer(has_gpu: bool, t: Thresholds) -> dict[str, ToolInfo]:
        tools = healthy_tools(has_gpu, t)
        tools["compute-sanitizer"] = ToolInfo("compute-sanitizer", detail="not found in $CUDA_HOME/bin")
        tools["cupy"] = ToolInfo("cupy", "14.2.0", cuda_works=False, detail="exit code 1: cudaErrorInsufficientDriver")
        return tools

    report = run_doctor(nvml_lib=FakeNvml([FakeGpu()]), tool_probe=no_sanitizer)
    assert report.problems == [
        "compute-sanitizer is missing: not found in $CUDA_HOME/bin (install cuda-sanitizer-13-0, "
        "or pip install nvidia-cuda-sanitizer-api)",
        "CUDA does not work through cupy: exit code 1: cudaErrorInsufficientDriver",
    ]


def fake_binary(folder: Path, name: str, output: str) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / name
    path.write_text(f"#!/bin/sh\ncat <<'EOF'\n{output}\nEOF\n")
    path.chmod(path.stat().st_mode | stat.S_IEXEC)
    return path


def test_compute_sanitizer_is_found_under_cuda_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = fake_binary(tmp_path / "cuda" / "bin", "compute-sanitizer",
                       "NVIDIA (R) Compute Sanitizer\nCopyright (c) 2020-2025 NVIDIA Corporation\n"
                       "Version 2025.3.1.0 (build 36398606) (public-release)")
    monkeypatch.setenv("CUDA_HOME", str(tmp_path / "cuda"))
    tools = doctor.collect_tools(False, Thresholds())
    assert tools["compute-sanitizer"].version == "2025.3.1.0"
    assert tools["compute-sanitizer"].path == str(path)


def test_a_tool_whose_version_cannot_be_read_is_not_found(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    fake_binary(tmp_path / "cuda" / "bin", "compute-sanitizer", "garbage")
    monkeypatch.setenv("CUDA_HOME", str(tmp_path / "cuda"))
    info = doctor.collect_tools(False, Thresholds())["compute-sanitizer"]
    assert not info.found and info.detail is not None and "`--version` failed" in info.detail


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc is not on PATH")
def test_real_nvcc_version() -> None:
    info = doctor.collect_tools(False, Thresholds())["nvcc"]
    assert info.version is not None and info.version.split(".")[0].isdigit()


def test_without_gpu_cuda_is_not_probed() -> None:
    tools = doctor.collect_tools(False, Thresholds())
    assert tools["torch"].found
    assert tools["torch"].cuda_works is None and tools["torch"].detail == "CUDA not probed: no GPU"


def test_cuda_probes_run_side_by_side(monkeypatch: pytest.MonkeyPatch) -> None:
    """`check` waits for the doctor: the torch and cupy probes (each a fresh interpreter) overlap."""
    import threading

    both = threading.Barrier(2, timeout=20)
    seen: list[str] = []

    def probe(script: str, timeout: float, pycache: Path | None = None, visible: object = None) -> doctor.ProbeResult:
        seen.append(script)
        both.wait()  # raises BrokenBarrierError unless the other probe runs at the same time
        return doctor.ProbeResult(True, "probed", {})

    monkeypatch.setattr(tools_module, "probe_cuda", probe)
    monkeypatch.setattr(tools_module, "_package_tool", lambda name, dists: doctor.ToolInfo(name, version="1.0"))
    tools = doctor.collect_tools(True, Thresholds())
    assert sorted(seen) == sorted(doctor.CUDA_PROBES.values())
    assert [(tools[n].cuda_works, tools[n].detail) for n in ("torch", "cupy")] == [(True, "probed")] * 2
    assert tools["triton"].cuda_works is None


def test_a_probe_given_the_runs_bytecode_directory_compiles_into_it(tmp_path: Path) -> None:
    """What the probe imports is compiled into the run's shared directory, for the jobs to reuse."""
    (tmp_path / "src").mkdir()
    (tmp_path / "src" / "probe_target.py").write_text("VALUE = 42\n")
    pycache = tmp_path / "pycache"
    pycache.mkdir()
    script = f"import sys; sys.path.insert(0, {str(tmp_path / 'src')!r}); import probe_target; print(probe_target.VALUE)"
    ok, detail, _ = doctor.probe_cuda(script, timeout=60, pycache=pycache)
    assert ok and detail == "42"
    assert any(p.name.startswith("probe_target.") for p in pycache.rglob("*.pyc"))
    assert not (tmp_path / "src" / "__pycache__").exists()


def test_probe_timeout_is_reported_not_hung() -> None:
    ok, detail, _ = doctor.probe_cuda("import time; time.sleep(60)", timeout=1)
    assert not ok and detail.startswith("the CUDA probe timed out after 1s")


def test_probe_crash_is_reported_not_raised() -> None:
    ok, detail, _ = doctor.probe_cuda("import os; os.abort()", timeout=30)
    assert not ok and detail == "killed by SIGABRT during the CUDA probe"


@pytest.mark.skipif(has_nvml_library(), reason="this machine has a GPU")
def test_gpu_seen_by_nvml_but_cuda_broken_fails_closed() -> None:
    # NVML says a GPU is there; torch and cupy are real and cannot use it here.
    report = run_doctor(nvml_lib=FakeNvml([FakeGpu()]), thresholds=Thresholds(required_tools=("torch", "cupy")))
    torch_problem = [p for p in report.problems if "through torch" in p]
    cupy_problem = [p for p in report.problems if "through cupy" in p]
    assert torch_problem and torch_problem[0].startswith("CUDA does not work through torch: the CUDA probe exited with code 1: ")
    assert cupy_problem and cupy_problem[0].startswith("CUDA does not work through cupy: the CUDA probe exited with code 1: ")


# --- which GPUs: CUDA_VISIBLE_DEVICES, and leaving a sick GPU out ----------------------------------

BUSY = [SimpleNamespace(pid=4242, usedGpuMemory=2 * GIB)]
SECOND = "GPU-0ddba11-7777-8888-9999-000011112222"


def two_gpus() -> FakeNvml:
    return FakeNvml([FakeGpu(), FakeGpu(uuid=SECOND, processes=list(BUSY))])


def test_only_the_gpus_this_runner_may_use_are_examined() -> None:
    """One runner per GPU on a shared host: the other runner's process on GPU 1 is not a
    problem of the runner that owns GPU 0."""
    mine = run_doctor(nvml_lib=two_gpus(), tool_probe=healthy_tools, visible=["0"])
    assert mine.healthy, mine.problems
    assert [(g.index, g.cuda_id) for g in mine.gpus] == [(0, "0")]
    theirs = run_doctor(nvml_lib=two_gpus(), tool_probe=healthy_tools, visible=[SECOND[:12]])
    assert [(g.index, g.cuda_id) for g in theirs.gpus] == [(1, SECOND[:12])]
    assert len(theirs.problems) == 1 and "GPU 1" in theirs.problems[0]


def test_cuda_visible_devices_is_followed_when_no_gpus_are_given(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "1")
    report = run_doctor(nvml_lib=two_gpus(), tool_probe=healthy_tools)
    assert [g.index for g in report.gpus] == [1] and not report.healthy
    assert "examined: 1 of the host's 2 GPU(s), as CUDA_VISIBLE_DEVICES=1 names them" in doctor.format_report(report)
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    none = run_doctor(nvml_lib=two_gpus(), tool_probe=healthy_tools)
    assert none.gpus == [] and none.problems == [
        "no NVIDIA GPU: CUDA_VISIBLE_DEVICES is empty: this runner may use none of the 2 GPU(s) NVML sees"]


def test_a_gpu_name_that_does_not_exist_is_a_problem() -> None:
    report = run_doctor(nvml_lib=two_gpus(), tool_probe=healthy_tools, visible=["0", "5"])
    assert [g.index for g in report.gpus] == [0]
    assert report.problems == ["no NVIDIA GPU: CUDA_VISIBLE_DEVICES names '5', which is not one of the 2 GPU(s) "
                               "NVML sees (indices 0-1, or a GPU UUID from `nvidia-smi -L`)"]


def test_a_sick_gpu_among_healthy_ones_is_left_out_with_a_warning() -> None:
    verdict = doctor.judge_runner(run_doctor(nvml_lib=two_gpus(), tool_probe=healthy_tools, visible=["0", "1"]))
    assert verdict.usable == ["0"] and verdict.blocking == []
    (w,) = verdict.excluded
    assert w.severity is Severity.WARNING and w.kind == "infrastructure" and w.check == "doctor"
    assert w.message.startswith("GPU 1 (NVIDIA H100 80GB HBM3): ") and "GPU 1 is left out of this run" in w.message


def test_a_runner_with_no_healthy_gpu_or_a_problem_of_its_own_is_unfit() -> None:
    sick = FakeNvml([FakeGpu(processes=list(BUSY))])
    alone = doctor.judge_runner(run_doctor(nvml_lib=sick, tool_probe=healthy_tools, visible=["0"]))
    assert alone.usable == [] and [f.severity for f in alone.blocking] == [Severity.ERROR] and not alone.excluded

    def broken_torch(has_gpu: bool, t: Thresholds) -> dict[str, ToolInfo]:
        tools = healthy_tools(has_gpu, t)
        tools["torch"] = ToolInfo("torch", "2.11.0", cuda_works=False, detail="exit code 1: no kernel image")
        return tools

    runner = doctor.judge_runner(run_doctor(nvml_lib=FakeNvml([FakeGpu()]), tool_probe=broken_torch, visible=["0"]))
    assert runner.usable == [] and len(runner.blocking) == 1 and "torch" in runner.blocking[0].message
    # GPUs that CUDA_VISIBLE_DEVICES does not name cannot be left out one by one
    unnamed = doctor.judge_runner(run_doctor(nvml_lib=two_gpus(), tool_probe=healthy_tools))
    assert unnamed.usable == [] and len(unnamed.blocking) == 1


def test_the_cuda_probes_see_only_the_runs_gpus(tmp_path: Path) -> None:
    ok, detail, _ = doctor.probe_cuda("import os; print(os.environ['CUDA_VISIBLE_DEVICES'])", timeout=60,
                                   visible=["2", "3"])
    assert ok and detail == "2,3"


def test_a_probe_that_fails_on_some_devices_names_them() -> None:
    script = "import json; print(json.dumps({'device': 'NVIDIA H100', 'cuda': '13.0', 'failed': {'1': 'boom'}}))"
    result = doctor.probe_cuda(script, timeout=60)
    assert result.works and result.failed_devices == {1: "boom"}
    assert result.detail == "CUDA works on NVIDIA H100 (CUDA 13.0); fails on device(s) 1"


def torch_fails_on(ordinal: int) -> Any:
    def probe(has_gpu: bool, t: Thresholds) -> dict[str, ToolInfo]:
        tools = healthy_tools(has_gpu, t)
        tools["torch"].failed_devices = {ordinal: "CUDA error: unspecified launch failure"}
        return tools
    return probe


def test_a_gpu_that_nvml_calls_healthy_but_cuda_cannot_use_is_left_out() -> None:
    lib = FakeNvml([FakeGpu(), FakeGpu(uuid=SECOND)])
    report = run_doctor(nvml_lib=lib, tool_probe=torch_fails_on(1), visible=["0", "1"])
    assert report.problems == ["GPU 1 (NVIDIA H100 80GB HBM3): CUDA fails on it through torch: CUDA error: "
                               "unspecified launch failure"]
    verdict = doctor.judge_runner(report)
    assert verdict.usable == ["0"] and not verdict.blocking and len(verdict.excluded) == 1


def test_a_failing_device_that_cannot_be_matched_to_a_gpu_makes_the_runner_unfit() -> None:
    lib = FakeNvml([FakeGpu(), FakeGpu(uuid=SECOND)])
    report = run_doctor(nvml_lib=lib, tool_probe=torch_fails_on(0), visible=["MIG-1234", "MIG-5678"])
    assert report.problems == ["CUDA fails on device 0 through torch: CUDA error: unspecified launch failure"]
    assert doctor.judge_runner(report).blocking


def test_doctor_main_applies_the_limits_it_is_given(capsys: pytest.CaptureFixture[str]) -> None:
    busy = FakeNvml([FakeGpu(processes=list(BUSY))])
    assert doctor_main(False, nvml_lib=busy, tool_probe=healthy_tools) == 1
    capsys.readouterr()
    lenient = Thresholds(allow_other_processes=True)
    assert doctor_main(False, nvml_lib=busy, tool_probe=healthy_tools, thresholds=lenient,
                       limits_from=".gpu-gate.yml") == 0
    assert "limits: runner.health of .gpu-gate.yml" in capsys.readouterr().out


def test_doctor_says_which_sandbox_the_jobs_get_and_why_not() -> None:
    from gpu_gate.executor.sandbox import Available

    works = doctor.run_doctor(nvml_lib=FakeNvml([FakeGpu()]), tool_probe=healthy_tools,
                              sandbox_probe=lambda: Available("bwrap", "/usr/bin/bwrap", "bubblewrap 0.8.0"))
    assert works.sandbox == "bwrap: bubblewrap 0.8.0" and works.healthy
    assert "sandbox: bwrap: bubblewrap 0.8.0" in doctor.format_report(works)
    why = "bwrap: not installed (apt-get install bubblewrap); unshare: unshare failed: Operation not permitted"
    none = doctor.run_doctor(nvml_lib=FakeNvml([FakeGpu()]), tool_probe=healthy_tools,
                             sandbox_probe=lambda: Available("none", None, why))
    assert none.sandbox == f"none: {why}"
    assert any("runs none under runner.sandbox: required" in n for n in none.notes)


def test_the_real_probe_finds_a_working_sandbox_where_bwrap_is_installed() -> None:
    """CI installs bubblewrap (.ci/run), so there the probe must find it working, not just present."""
    import shutil

    from gpu_gate.executor import sandbox

    if shutil.which("bwrap") is None:
        pytest.skip("bubblewrap is not installed here")
    assert sandbox.probe().kind == "bwrap", sandbox.probe().detail
