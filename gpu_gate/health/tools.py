"""The tools gpu-gate needs on a runner (compute-sanitizer, nvcc, torch, triton, cupy): found, their
versions read, and, where there is a GPU, CUDA proven to work through torch and cupy with a tiny
allocation, kernel and synchronise, in a subprocess with a timeout (a broken driver can neither
hang nor crash the doctor)."""
from __future__ import annotations

import concurrent.futures
import importlib.metadata
import importlib.util
import json
import os
import re
import shutil
import sys
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import NamedTuple

from .. import proc
from .model import GpuHealth, Thresholds, ToolInfo


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
        from ..cuda import sanitizer
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


def tool_problems(tools: dict[str, ToolInfo], t: Thresholds) -> list[str]:
    out: list[str] = []
    for name in t.required_tools:
        info = tools.get(name)
        if info is None or not info.found:
            out.append(f"{name} is missing: {info.detail if info else 'not looked for'} ({_INSTALL_HINT.get(name, '')})")
        elif info.cuda_works is False:
            out.append(f"CUDA does not work through {name}: {info.detail}")
    return out


def tool_notes(tools: dict[str, ToolInfo], t: Thresholds, has_gpu: bool) -> list[str]:
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


def failed_devices(tools: dict[str, ToolInfo], gpus: list[GpuHealth], tokens: list[str] | None) -> list[str]:
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
