"""``gpu-gate doctor``: is this machine fit to be a GPU runner?

It reads the driver and every GPU through NVML (:mod:`gpu_gate.nvml`), finds the
tools gpu-gate needs (compute-sanitizer, nvcc, torch, triton, cupy), and proves
that CUDA works through torch and through cupy with a tiny allocation, kernel and
synchronise. Those proofs run in a subprocess with a timeout, so a broken driver
can neither hang nor crash doctor.

The result is data (:class:`DoctorReport`). Every problem is one line; ``check``
turns them into infrastructure findings (:func:`infrastructure_findings`) and fails
closed on an unfit runner. A runner without a GPU is not fit.
"""
from __future__ import annotations

import concurrent.futures
import dataclasses
import importlib.metadata
import importlib.util
import json
import os
import re
import shutil
import sys
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any, NamedTuple

from .. import nvml, proc
from ..executor import sandbox
from ..exitcodes import ExitCode
from ..findings import Finding, Severity

MIB = 1024 * 1024

# Clock events that mean the GPU is being slowed by the hardware: results and
# timings taken now are not trustworthy. Idle, application clocks, sync boost
# and a software power cap under load are normal operation.
BAD_THROTTLE = frozenset({"hw_slowdown", "sw_thermal_slowdown", "hw_thermal_slowdown", "hw_power_brake_slowdown"})

NO_GPU = "no NVIDIA GPU"


@dataclasses.dataclass(frozen=True)
class Thresholds:
    max_temperature_c: int = 85
    min_free_memory_mib: int = 1024
    # Lifetime uncorrectable ECC errors are history; None reports them without judging.
    max_aggregate_uncorrected_ecc: int | None = None
    allow_other_processes: bool = False
    probe_timeout_s: float = 120.0
    tool_timeout_s: float = 30.0
    required_tools: tuple[str, ...] = ("compute-sanitizer", "torch", "triton", "cupy")


@dataclasses.dataclass
class ToolInfo:
    name: str
    version: str | None = None  # None: not found
    path: str | None = None
    cuda_works: bool | None = None  # None: not probed
    detail: str | None = None  # why not found / why CUDA failed / what was probed
    failed_devices: dict[int, str] = dataclasses.field(default_factory=dict)  # CUDA ordinal -> error

    @property
    def found(self) -> bool:
        return self.version is not None


@dataclasses.dataclass
class GpuHealth:
    index: int
    name: str
    uuid: str | None
    memory_total_mib: int | None
    memory_free_mib: int | None
    temperature_c: int | None
    throttle_reasons: list[str]
    ecc_uncorrected: dict[str, int | None]  # {"volatile": n, "aggregate": n}
    retired_pages: dict[str, int | bool | None]  # {"sbe": n, "dbe": n, "pending": bool}
    row_remap: dict[str, int | bool | None]  # {"correctable", "uncorrectable", "pending", "failure"}
    processes: list[dict[str, Any]] | None  # other compute processes: pid, name, used_memory_mib
    unsupported: list[str]
    problems: list[str]
    cuda_id: str | None = None  # how CUDA_VISIBLE_DEVICES names it (an index or a UUID); None: not named


@dataclasses.dataclass
class DoctorReport:
    has_gpu: bool
    gpus: list[GpuHealth]
    tools: dict[str, ToolInfo]
    problems: list[str]
    notes: list[str]
    driver_version: str | None = None
    cuda_driver_version: str | None = None
    gpus_on_host: int = 0  # what NVML sees, this runner's or not
    visible: list[str] | None = None  # the CUDA_VISIBLE_DEVICES names followed; None: every GPU
    sandbox: str | None = None  # the jobs' sandbox: "bwrap: <version>", or "none: <why>"

    @property
    def healthy(self) -> bool:
        return not self.problems

    def to_json(self) -> dict[str, Any]:
        d = dataclasses.asdict(self)
        d["healthy"] = self.healthy
        return d


ToolProbe = Callable[[bool, Thresholds], dict[str, ToolInfo]]


def run_doctor(
    *,
    thresholds: Thresholds | None = None,
    nvml_lib: Any | None = None,
    tool_probe: ToolProbe | None = None,
    pycache: Path | None = None,
    visible: Sequence[str] | None = None,
    sandbox_probe: Callable[[], sandbox.Available] | None = None,
) -> DoctorReport:
    """Examine this machine. ``nvml_lib`` replaces ``pynvml`` and ``tool_probe`` the tool search (tests).
    ``pycache``: the run's shared bytecode directory, which the CUDA probes then fill for the jobs.
    ``visible``: the GPUs to examine, as CUDA_VISIBLE_DEVICES names them (indices or UUIDs);
    None: those CUDA_VISIBLE_DEVICES names, or every GPU where it is unset. The GPUs of other
    runners on the same host are none of this runner's business."""
    exam = examine_gpus(thresholds=thresholds, nvml_lib=nvml_lib, visible=visible)
    return complete(exam, tool_probe=tool_probe, pycache=pycache, sandbox_probe=sandbox_probe)


@dataclasses.dataclass
class GpuExam:
    """The first half of the doctor: the GPUs as NVML sees them (fast), before the tools' probes."""

    thresholds: Thresholds
    problems: list[str]
    notes: list[str]
    gpus: list[GpuHealth]
    driver: str | None
    cuda: str | None
    on_host: int
    tokens: list[str] | None


def examine_gpus(*, thresholds: Thresholds | None = None, nvml_lib: Any | None = None,
                 visible: Sequence[str] | None = None) -> GpuExam:
    """The GPUs' own health, from NVML: temperature, memory, ECC, other processes. A fraction of a
    second; the tools' probes (``complete``) take seconds."""
    t = thresholds or Thresholds()
    problems: list[str] = []
    notes: list[str] = []
    gpus: list[GpuHealth] = []
    driver = cuda = None
    on_host = 0
    tokens = list(visible) if visible is not None else visible_from_env()
    try:
        snap = nvml.snapshot(nvml_lib)
    except nvml.NvmlUnavailable as exc:
        problems.append(_no_gpu_message(exc))
    else:
        driver, cuda, on_host = snap.driver_version, snap.cuda_driver_version, len(snap.gpus)
        samples, named = _visible_samples(list(snap.gpus), tokens, problems, notes)
        gpus = [_judge_gpu(s, t, notes) for s in samples]
        for g, cuda_id in zip(gpus, named):
            g.cuda_id = cuda_id
        if not snap.gpus:
            problems.append(f"{NO_GPU}: the driver is loaded but NVML sees no GPU (is one assigned to this runner?)")
    return GpuExam(t, problems, notes, gpus, driver, cuda, on_host, tokens)


def complete(exam: GpuExam, *, tool_probe: ToolProbe | None = None, pycache: Path | None = None,
             sandbox_probe: Callable[[], sandbox.Available] | None = None) -> DoctorReport:
    """The second half: the tools (compute-sanitizer, CUDA through torch and CuPy), and the report."""
    t, gpus, tokens = exam.thresholds, exam.gpus, exam.tokens
    problems, notes = list(exam.problems), list(exam.notes)
    has_gpu = bool(gpus)
    tools = tool_probe(has_gpu, t) if tool_probe else collect_tools(has_gpu, t, pycache=pycache, visible=tokens)
    runner_wide = _failed_devices(tools, gpus, tokens)
    for g in gpus:
        problems.extend(g.problems)
    if has_gpu:
        problems.extend(_tool_problems(tools, t) + runner_wide)
    notes.extend(_tool_notes(tools, t, has_gpu))
    box = (sandbox_probe or sandbox.probe)()
    if not box.works:
        notes.append("no sandbox works here: `check` runs jobs unsandboxed under runner.sandbox: auto (with a "
                     "warning) and runs none under runner.sandbox: required")
    elif box.kind == "unshare":
        notes.append("sandbox: unshare only (install bubblewrap for a private /tmp and /dev, and hidden rather than "
                     "read-only report and cache directories)")
    return DoctorReport(has_gpu, gpus, tools, problems, notes, exam.driver, exam.cuda, exam.on_host, tokens,
                        sandbox=f"{box.kind}: {box.detail}")


def _failed_devices(tools: dict[str, ToolInfo], gpus: list[GpuHealth], tokens: list[str] | None) -> list[str]:
    """NVML may call a GPU healthy on which CUDA still fails: each device the torch probe could not
    use becomes a problem of that GPU (it can be left out), or of the runner where the probe's
    device numbering cannot be matched to NVML's (MIG instances)."""
    info = tools.get("torch")
    if info is None or not info.failed_devices:
        return []
    matched = tokens is None or not any(tok.startswith("MIG-") for tok in tokens)
    runner_wide: list[str] = []
    for ordinal, why in sorted(info.failed_devices.items()):
        if matched and 0 <= ordinal < len(gpus):
            g = gpus[ordinal]  # both follow CUDA_VISIBLE_DEVICES's order, or PCI bus order without it
            g.problems.append(f"GPU {g.index} ({g.name}): CUDA fails on it through torch: {why}")
        else:
            runner_wide.append(f"CUDA fails on device {ordinal} through torch: {why}")
    return runner_wide


def visible_from_env() -> list[str] | None:
    """CUDA_VISIBLE_DEVICES as a list of names; None where it is unset (every GPU is visible)."""
    raw = os.environ.get("CUDA_VISIBLE_DEVICES")
    if raw is None:
        return None
    return [v.strip() for v in raw.split(",") if v.strip() and v.strip() != "-1"]


def _visible_samples(samples: list[nvml.GpuSample], tokens: list[str] | None, problems: list[str],
                     notes: list[str]) -> tuple[list[nvml.GpuSample], list[str | None]]:
    """The GPUs named by ``tokens`` (NVML index or UUID prefix, as CUDA reads them), each with its
    name; all of them, unnamed, where there are no tokens to follow."""
    if tokens is None or not samples:
        return samples, [None] * len(samples)
    if any(tok.startswith("MIG-") for tok in tokens):
        notes.append("CUDA_VISIBLE_DEVICES names MIG instances: every GPU of the host is examined")
        return samples, [None] * len(samples)
    chosen: list[nvml.GpuSample] = []
    named: list[str | None] = []
    for tok in tokens:
        hit = next((s for s in samples if (tok.isdigit() and s.index == int(tok))
                    or (tok.startswith("GPU-") and (s.uuid or "").startswith(tok))), None)
        if hit is None:
            problems.append(f"{NO_GPU}: CUDA_VISIBLE_DEVICES names {tok!r}, which is not one of the {len(samples)} "
                            f"GPU(s) NVML sees (indices 0-{len(samples) - 1}, or a GPU UUID from `nvidia-smi -L`)")
            continue
        if hit not in chosen:
            chosen.append(hit)
            named.append(tok)
    if not tokens:
        problems.append(f"{NO_GPU}: CUDA_VISIBLE_DEVICES is empty: this runner may use none of the "
                        f"{len(samples)} GPU(s) NVML sees")
    return chosen, named


def _no_gpu_message(exc: nvml.NvmlUnavailable) -> str:
    if exc.code == nvml.ERROR_LIBRARY_NOT_FOUND:
        return (
            f"{NO_GPU}: NVML library not found ({exc.reason}: libnvidia-ml.so.1 is not loadable; install the "
            "NVIDIA driver, or start the container with the NVIDIA runtime: --gpus all / runtimeClassName: nvidia)"
        )
    if exc.code == nvml.ERROR_DRIVER_NOT_LOADED:
        return f"{NO_GPU}: the NVIDIA kernel driver is not loaded ({exc.reason}; check `nvidia-smi` and dmesg)"
    return f"{NO_GPU}: NVML could not start ({exc.reason})"


# --- GPUs ---------------------------------------------------------------------------------------


def _mib(n: int | None) -> int | None:
    return None if n is None else n // MIB


def _judge_gpu(s: nvml.GpuSample, t: Thresholds, notes: list[str]) -> GpuHealth:
    throttle = nvml.decode_throttle(s.throttle_mask) if s.throttle_mask is not None else []
    others = [
        {"pid": p.pid, "name": p.name, "used_memory_mib": _mib(p.used_memory),
         **({"started_the_gate": True} if p.ancestor else {})} for p in (s.processes or ())
    ]
    health = GpuHealth(
        index=s.index,
        name=s.name,
        uuid=s.uuid,
        memory_total_mib=_mib(s.memory_total),
        memory_free_mib=_mib(s.memory_free),
        temperature_c=s.temperature_c,
        throttle_reasons=throttle,
        ecc_uncorrected={"volatile": s.ecc_uncorrected_volatile, "aggregate": s.ecc_uncorrected_aggregate},
        retired_pages={"sbe": s.retired_pages_sbe, "dbe": s.retired_pages_dbe, "pending": s.retired_pages_pending},
        row_remap={
            "correctable": s.remapped_rows_correctable,
            "uncorrectable": s.remapped_rows_uncorrectable,
            "pending": s.remap_pending,
            "failure": s.remap_failure,
        },
        processes=others if s.processes is not None else None,
        unsupported=list(s.unsupported),
        problems=[],
    )
    prefix = f"GPU {s.index} ({s.name})"
    health.problems = [f"{prefix}: {p}" for p in _gpu_problems(health, s, t)]
    notes.extend(f"{prefix}: {n}" for n in _gpu_notes(health, t))
    return health


def _gpu_problems(h: GpuHealth, s: nvml.GpuSample, t: Thresholds) -> list[str]:
    out: list[str] = []
    if h.memory_free_mib is not None and h.memory_free_mib < t.min_free_memory_mib:
        out.append(f"only {h.memory_free_mib} MiB of {h.memory_total_mib} MiB memory free (need {t.min_free_memory_mib})")
    if h.temperature_c is not None and h.temperature_c > t.max_temperature_c:
        out.append(f"temperature {h.temperature_c} C is above {t.max_temperature_c} C")
    bad = [r for r in h.throttle_reasons if r in BAD_THROTTLE]
    if bad:
        out.append(f"clocks are being slowed by the hardware: {', '.join(bad)} (check cooling and power)")
    out.extend(_memory_problems(h, t))
    if not t.allow_other_processes:
        for p in h.processes or ():
            if p.get("started_the_gate"):
                continue  # it waits for the gate (a test, a script); its memory counts in the free memory above
            who, used = _holder(p)
            out.append(f"another process holds GPU memory: {who}, {used}; the GPU must be free for a gate run")
    out.extend(f"could not read {what} ({err})" for what, err in s.errors.items())
    return out


def _holder(p: dict[str, Any]) -> tuple[str, str]:
    """A process on the GPU, as the doctor names it: ``pid N (name)``, and the memory it holds."""
    used = f"{p['used_memory_mib']} MiB" if p["used_memory_mib"] is not None else "memory"
    return f"pid {p['pid']}" + (f" ({p['name']})" if p["name"] else ""), used


def _memory_problems(h: GpuHealth, t: Thresholds) -> list[str]:
    out: list[str] = []
    vol, agg = h.ecc_uncorrected["volatile"], h.ecc_uncorrected["aggregate"]
    if vol:
        out.append(f"{vol} uncorrectable ECC error(s) since the driver loaded (drain the node and reset the GPU)")
    limit = t.max_aggregate_uncorrected_ecc
    if agg is not None and limit is not None and agg > limit:
        out.append(f"{agg} uncorrectable ECC error(s) over the GPU's life, more than {limit} allowed")
    if h.retired_pages["pending"]:
        out.append("a page retirement is pending (reset the GPU or reboot to apply it)")
    if h.row_remap["failure"]:
        out.append("row remapping failed: the GPU's memory cannot be repaired (the GPU needs service)")
    if h.row_remap["pending"]:
        out.append("a row remap is pending (reset the GPU to apply it)")
    return out


def _gpu_notes(h: GpuHealth, t: Thresholds) -> list[str]:
    out: list[str] = []
    agg = h.ecc_uncorrected["aggregate"]
    if agg and t.max_aggregate_uncorrected_ecc is None:
        out.append(f"{agg} uncorrectable ECC error(s) over the GPU's life (history; none since the driver loaded)")
    if h.unsupported:
        out.append(f"not supported by this GPU or driver: {', '.join(h.unsupported)}")
    if t.allow_other_processes and h.processes:
        out.append(f"{len(h.processes)} other compute process(es) on this GPU (allowed by the thresholds)")
    for p in h.processes or ():
        if p.get("started_the_gate") and not t.allow_other_processes:
            who, used = _holder(p)
            out.append(f"{who}, which started gpu-gate and waits for it, holds {used} of GPU memory: not counted "
                       "as another process (the free memory is checked as always)")
    return out


# --- tools --------------------------------------------------------------------------------------


def collect_tools(has_gpu: bool, t: Thresholds, *, pycache: Path | None = None,
                  visible: Sequence[str] | None = None) -> dict[str, ToolInfo]:
    """Find every tool and, when there is a GPU, prove CUDA works through torch and cupy."""
    tools = {
        "compute-sanitizer": _binary_tool("compute-sanitizer", find_compute_sanitizer(), r"Version\s+(\S+)", t),
        "nvcc": _binary_tool("nvcc", _find_binary("nvcc"), r"release\s+[\d.]+,\s+V(\S+)", t),
        "torch": _package_tool("torch", ("torch",)),
        "triton": _package_tool("triton", ("triton",)),
        "cupy": _package_tool("cupy", ("cupy-cuda13x", "cupy-cuda12x", "cupy")),
    }
    probed = [tools[name] for name in CUDA_PROBES if tools[name].found]
    if not has_gpu:
        for info in probed:
            info.detail = "CUDA not probed: no GPU"
        return tools
    # Each probe is a fresh interpreter importing its package (seconds each): run them side by side,
    # since `check` waits for the doctor before its first job.
    with concurrent.futures.ThreadPoolExecutor(max_workers=len(probed) or 1) as pool:
        answers = list(pool.map(lambda info: probe_cuda(CUDA_PROBES[info.name], t.probe_timeout_s, pycache, visible), probed))
    for info, answer in zip(probed, answers):
        info.cuda_works, info.detail, info.failed_devices = answer.works, answer.detail, dict(answer.failed_devices)
    return tools


def _cuda_dirs() -> list[Path]:
    dirs = [Path(os.environ[v]) / "bin" for v in ("CUDA_HOME", "CUDA_PATH") if os.environ.get(v)]
    return dirs


def _find_binary(name: str, extra: Iterable[Path] = ()) -> str | None:
    """``$CUDA_HOME/bin``, then PATH, then /usr/local/cuda/bin, then ``extra``."""
    for d in _cuda_dirs():
        if os.access(d / name, os.X_OK):
            return str(d / name)
    found = shutil.which(name)
    if found:
        return found
    for d in (Path("/usr/local/cuda/bin"), *extra):
        if os.access(d / name, os.X_OK):
            return str(d / name)
    return None


def _sanitizer_wheel_dirs() -> list[Path]:
    """``bin`` folders of the nvidia-cuda-sanitizer-api wheel (``nvidia/cu13/bin`` and older layouts)."""
    spec = importlib.util.find_spec("nvidia")
    if spec is None or not spec.submodule_search_locations:
        return []
    dirs: list[Path] = []
    for root in spec.submodule_search_locations:
        dirs.extend(sorted(Path(root).glob("*/bin")))
    return dirs


def find_compute_sanitizer() -> str | None:
    located = _locate_with_sanitizer_module()
    return located or _find_binary("compute-sanitizer", _sanitizer_wheel_dirs())


def _locate_with_sanitizer_module() -> str | None:
    try:
        from ..cuda import sanitizer  # type: ignore[attr-defined]
    except ImportError:
        return None
    locate = getattr(sanitizer, "locate", None)
    if locate is None:
        return None
    try:
        found = locate()
    except Exception:  # noqa: BLE001 - its own error is reported by the sanitizer checks; doctor looks on
        return None
    found = getattr(found, "path", found)
    return str(found) if found else None


def _binary_tool(name: str, path: str | None, pattern: str, t: Thresholds) -> ToolInfo:
    if path is None:
        return ToolInfo(name, detail="not found in $CUDA_HOME/bin, PATH or /usr/local/cuda/bin")
    res = proc.run([path, "--version"], timeout=t.tool_timeout_s)
    match = re.search(pattern, res.stdout + res.stderr)
    if not res.ok or not match:
        return ToolInfo(name, path=path, detail=f"`--version` failed: {res.describe()}")
    return ToolInfo(name, version=match.group(1), path=path)


def _package_tool(name: str, dists: tuple[str, ...]) -> ToolInfo:
    for dist in dists:
        try:
            return ToolInfo(name, version=importlib.metadata.version(dist), detail=f"package {dist}")
        except importlib.metadata.PackageNotFoundError:
            continue
    return ToolInfo(name, detail=f"Python package not installed ({' or '.join(dists)})")


# A tiny allocation, one kernel, a synchronise and a check of the answer: through torch on every
# visible device (a GPU that NVML calls healthy may still fail there), through cupy on the first.
CUDA_PROBES: dict[str, str] = {
    "torch": """
import json, torch
n = torch.cuda.device_count()
failed = {}
for i in range(n):
    try:
        x = torch.arange(4096, device=f"cuda:{i}", dtype=torch.float32)
        y = float((x * 2).sum())
        torch.cuda.synchronize(i)
        assert y == 4095 * 4096, f"wrong answer {y}"
    except Exception as exc:
        failed[i] = ((str(exc).strip().splitlines() or [type(exc).__name__])[0])[:300]
if len(failed) == n:
    raise SystemExit(f"CUDA failed on every device ({n}): {failed}" if n else "torch sees no CUDA device")
first = min(set(range(n)) - set(failed))
print(json.dumps({"device": torch.cuda.get_device_name(first), "cuda": torch.version.cuda, "failed": failed}))
""",
    "cupy": """
import json, cupy
k = cupy.ElementwiseKernel("float32 x", "float32 y", "y = x * 2", "gpu_gate_doctor_double")
x = cupy.arange(4096, dtype=cupy.float32)
y = float(k(x).sum())
cupy.cuda.Device().synchronize()
assert y == 4095 * 4096, y
v = cupy.cuda.runtime.runtimeGetVersion()
print(json.dumps({"device": cupy.cuda.runtime.getDeviceProperties(0)["name"].decode(),
                  "cuda": f"{v // 1000}.{v % 1000 // 10}"}))
""",
}


class ProbeResult(NamedTuple):
    works: bool
    detail: str  # what it said, or why it failed
    failed_devices: dict[int, str]  # devices it could not use, where others worked


def probe_cuda(script: str, timeout: float, pycache: Path | None = None,
               visible: Sequence[str] | None = None) -> ProbeResult:
    """Run ``script`` in a fresh interpreter. With ``pycache``, what it imports is compiled there
    once (torch: seconds) and the run's jobs reuse it. With ``visible``, it sees those GPUs only.
    It numbers devices in PCI bus order, as NVML does."""
    env = proc.scrubbed_env()
    env.setdefault("CUDA_DEVICE_ORDER", "PCI_BUS_ID")
    if pycache is not None:
        env.pop("PYTHONDONTWRITEBYTECODE", None)
        env["PYTHONPYCACHEPREFIX"] = str(pycache)
    if visible is not None:
        env["CUDA_VISIBLE_DEVICES"] = ",".join(visible)
    res = proc.run([sys.executable, "-c", script], timeout=timeout, env=env)
    if not res.ok:
        return ProbeResult(False, _probe_failure(res), {})
    last = (res.stdout.strip().splitlines() or [""])[-1]
    try:
        info = json.loads(last)
    except ValueError:
        info = None
    if not isinstance(info, dict):
        return ProbeResult(True, last, {})
    failed = {int(k): str(v) for k, v in (info.get("failed") or {}).items()}
    more = f"; fails on device(s) {', '.join(map(str, sorted(failed)))}" if failed else ""
    return ProbeResult(True, f"CUDA works on {info.get('device')} (CUDA {info.get('cuda')}){more}", failed)


def _probe_failure(res: proc.ProcResult) -> str:
    if res.timed_out:
        return f"the CUDA probe timed out after {res.duration_s:.0f}s (a hung driver or GPU)"
    if res.signal:
        # The argv holds the whole script; name the signal without it.
        return res.describe().split(":", 1)[0] + " during the CUDA probe"
    why = res.tail(1).strip() or res.tail(1, "stdout").strip() or "no output"
    return f"the CUDA probe exited with code {res.returncode}: {why}"


def _tool_problems(tools: dict[str, ToolInfo], t: Thresholds) -> list[str]:
    out: list[str] = []
    for name in t.required_tools:
        info = tools.get(name)
        if info is None or not info.found:
            out.append(f"{name} is missing: {info.detail if info else 'not looked for'} ({_INSTALL_HINT.get(name, '')})")
        elif info.cuda_works is False:
            out.append(f"CUDA does not work through {name}: {info.detail}")
    return out


def _tool_notes(tools: dict[str, ToolInfo], t: Thresholds, has_gpu: bool) -> list[str]:
    out: list[str] = []
    for name, info in tools.items():
        if has_gpu and name in t.required_tools:
            continue
        if not info.found:
            out.append(f"{name} not found ({info.detail})")
        elif info.cuda_works is False:
            out.append(f"CUDA does not work through {name}: {info.detail}")
    return out


_INSTALL_HINT = {
    "compute-sanitizer": "install cuda-sanitizer-13-0, or pip install nvidia-cuda-sanitizer-api",
    "torch": "pip install torch from the CUDA index",
    "triton": "pip install triton",
    "cupy": "pip install cupy-cuda13x",
    "nvcc": "install the CUDA toolkit (cuda-nvcc-13-0)",
}


# --- output -------------------------------------------------------------------------------------


@dataclasses.dataclass
class RunnerVerdict:
    """What ``check`` makes of a doctor report: the GPUs it may use, and why not the others."""

    usable: list[str]  # CUDA_VISIBLE_DEVICES names of the healthy GPUs
    blocking: list[Finding]  # the runner is unfit: no job may start
    excluded: list[Finding]  # warnings: GPUs left out, the run goes on without them


def judge_runner(report: DoctorReport) -> RunnerVerdict:
    """A problem of one GPU among several leaves that GPU out: results from the healthy ones are
    sound. A problem of the whole runner (a tool, CUDA through torch or cupy, no GPU), or of a GPU
    that cannot be left out (CUDA_VISIBLE_DEVICES does not name it), makes it unfit."""
    per_gpu = {p for g in report.gpus for p in g.problems}
    runner_wide = [p for p in report.problems if p not in per_gpu]
    healthy = [g.cuda_id for g in report.gpus if not g.problems and g.cuda_id is not None]
    unnamed_bad = any(g.problems and g.cuda_id is None for g in report.gpus)
    if runner_wide or unnamed_bad or not healthy:
        return RunnerVerdict([], infrastructure_findings(report), [])
    excluded = [Finding(check="doctor", kind="infrastructure", severity=Severity.WARNING,
                        message=f"{p}; GPU {g.cuda_id} is left out of this run, the others run its jobs")
                for g in report.gpus for p in g.problems]
    return RunnerVerdict(healthy, [], excluded)


def infrastructure_findings(report: DoctorReport) -> list[Finding]:
    """One ERROR finding per problem, so that ``check`` fails closed on an unfit runner."""
    return [Finding(check="doctor", kind="infrastructure", message=p, severity=Severity.ERROR) for p in report.problems]


def format_report(report: DoctorReport, limits_from: str | None = None) -> str:
    lines = ["gpu-gate doctor"]
    if report.driver_version or report.cuda_driver_version:
        lines.append(f"driver {report.driver_version or '?'}, CUDA {report.cuda_driver_version or '?'} (driver API)")
    lines.append(f"limits: runner.health of {limits_from}" if limits_from else "limits: gpu-gate's defaults")
    if report.visible is not None and report.gpus_on_host:
        lines.append(f"examined: {len(report.gpus)} of the host's {report.gpus_on_host} GPU(s), as "
                     f"CUDA_VISIBLE_DEVICES={','.join(report.visible)} names them")
    for g in report.gpus:
        lines.extend(_format_gpu(g))
    if report.sandbox:
        lines.append(f"sandbox: {report.sandbox}")
    lines.append("tools:")
    for info in report.tools.values():
        lines.append("  " + _format_tool(info))
    if report.notes:
        lines.append("notes:")
        lines.extend(f"  {n}" for n in report.notes)
    if report.healthy:
        lines.append("healthy: this machine is fit to run gpu-gate")
    else:
        lines.append(f"NOT FIT: {len(report.problems)} problem(s):")
        lines.extend(report.problems)
    return "\n".join(lines)


def _na(v: object) -> str:
    return "n/a" if v is None else str(v)


def _format_gpu(g: GpuHealth) -> list[str]:
    procs = g.processes
    return [
        f"GPU {g.index}: {g.name}" + (f" ({g.uuid})" if g.uuid else ""),
        f"  memory      {_na(g.memory_free_mib)} MiB free of {_na(g.memory_total_mib)} MiB",
        f"  temperature {_na(g.temperature_c)} C",
        f"  clocks      {', '.join(g.throttle_reasons) or 'no slowdown'}",
        f"  ECC uncorr. {_na(g.ecc_uncorrected['volatile'])} volatile, {_na(g.ecc_uncorrected['aggregate'])} aggregate",
        f"  retired     sbe {_na(g.retired_pages['sbe'])}, dbe {_na(g.retired_pages['dbe'])}, "
        f"pending {_na(g.retired_pages['pending'])}",
        f"  row remap   {_na(g.row_remap['correctable'])} correctable, {_na(g.row_remap['uncorrectable'])} "
        f"uncorrectable, pending {_na(g.row_remap['pending'])}, failure {_na(g.row_remap['failure'])}",
        f"  processes   {'n/a' if procs is None else (len(procs) or 'none')}",
    ]


def _format_tool(info: ToolInfo) -> str:
    text = f"{info.name:<18} {info.version or 'missing'}"
    if info.path:
        text += f"  {info.path}"
    if info.detail:
        text += f"  ({info.detail})"
    return text


def doctor_main(json_output: bool, *, nvml_lib: Any | None = None, tool_probe: ToolProbe | None = None,
                thresholds: Thresholds | None = None, limits_from: str | None = None) -> int:
    """``gpu-gate doctor [--json]``: print the report; 0 when fit, 1 with one line per problem.
    ``limits_from``: the policy that ``thresholds`` come from, to say so."""
    report = run_doctor(thresholds=thresholds, nvml_lib=nvml_lib, tool_probe=tool_probe)
    if json_output:
        print(json.dumps({**report.to_json(), "limits_from": limits_from}, indent=2))
    else:
        print(format_report(report, limits_from))
    return int(ExitCode.PASSED if report.healthy else ExitCode.POLICY_BREACHED)
