"""Which NVIDIA device nodes a GPU job's sandbox holds: the driver's shared nodes, and its own GPU's alone.

CUDA reaches a GPU through ``/dev/nvidiaN`` (N: the GPU's minor number), after ``/dev/nvidiactl``
and the UVM nodes. A bubblewrap sandbox builds its own ``/dev``; one that holds a single
``/dev/nvidiaN`` gives the job that GPU and no other: a process inside that names another GPU in
``CUDA_VISIBLE_DEVICES`` finds nothing to open, so a job cannot load, fill or hang the GPU on which
another job is judged.

Inside such a sandbox CUDA numbers the one GPU it can open 0, whatever its number outside: the job
names its GPU by UUID, which means the same GPU on both sides (an index would point at nothing).

The GPUs come from the driver's ``/proc/driver/nvidia/gpus/*/information`` (UUID, minor number, PCI
bus), else from NVML. Where the job's GPU cannot be told apart from the others (a MIG instance, CUDA
numbering GPUs fastest first, no driver information), the sandbox holds every GPU's node, as before,
and :attr:`JobGpu.whole` says why, for the run's notes.
"""
from __future__ import annotations

import dataclasses
import functools
import glob
import os
import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any

PROC_GPUS = Path("/proc/driver/nvidia/gpus")
_GPU_NODE = re.compile(r"nvidia(\d+)")


@dataclasses.dataclass(frozen=True)
class Gpu:
    """One GPU as the driver names it."""

    minor: int  # N of /dev/nvidiaN
    uuid: str  # "GPU-…"
    bus: str  # PCI bus id, "0000:18:00.0" (lower case): CUDA's PCI_BUS_ID order sorts by it


@dataclasses.dataclass(frozen=True)
class JobGpu:
    """What a job on one GPU gets in its sandbox."""

    nodes: tuple[str, ...]  # device nodes to bind (the shared ones, and its GPU's)
    cuda_name: str  # CUDA_VISIBLE_DEVICES inside the sandbox
    whole: str | None = None  # why every GPU's node is bound; None: only the job's own


def _bus(text: str) -> str:
    """PCI bus ids in one form: NVML gives 8 hex digits of domain and upper case, the driver 4 and lower."""
    parts = text.strip().lower().split(":")
    if len(parts) == 2:
        parts = ["0", *parts]
    if len(parts) != 3:
        return text.strip().lower()
    try:
        return f"{int(parts[0], 16):04x}:{parts[1]}:{parts[2]}"
    except ValueError:
        return text.strip().lower()


def _fields(text: str) -> dict[str, str]:
    out: dict[str, str] = {}
    for line in text.splitlines():
        key, sep, value = line.partition(":")
        if sep:
            out[key.strip().lower()] = value.strip()
    return out


def from_proc(root: Path = PROC_GPUS) -> list[Gpu]:
    """The GPUs the driver lists under ``/proc/driver/nvidia/gpus``; empty where it lists none."""
    found: list[Gpu] = []
    for info in sorted(root.glob("*/information")):
        try:
            f = _fields(info.read_text(errors="replace"))
            minor, uuid = int(f["device minor"]), f["gpu uuid"]
        except (OSError, KeyError, ValueError):
            continue
        if uuid.startswith("GPU-"):
            found.append(Gpu(minor, uuid, _bus(f.get("bus location") or info.parent.name)))
    return found


def from_nvml(lib: Any | None = None) -> list[Gpu]:
    """The same from NVML (``nvmlDeviceGetMinorNumber``); empty where NVML cannot say."""
    from .. import nvml

    try:
        return [Gpu(minor, uuid, _bus(bus)) for minor, uuid, bus in nvml.identities(lib)]
    except nvml.NvmlUnavailable:
        return []


@functools.lru_cache(maxsize=1)
def gpus() -> tuple[Gpu, ...]:
    """This machine's GPUs (read once per run)."""
    return tuple(from_proc() or from_nvml())


def node_names(dev: str = "/dev") -> list[str]:
    """Every NVIDIA device node: control, UVM, MIG capabilities, every GPU."""
    return sorted(glob.glob(os.path.join(dev, "nvidia*")))


def for_job(token: str, found: Sequence[Gpu] | None = None, nodes: Sequence[str] | None = None,
            order: str | None = None) -> JobGpu:
    """The nodes and the CUDA name for a job on the GPU that ``token`` names as CUDA_VISIBLE_DEVICES
    does outside (an index in PCI bus order, or a UUID or its prefix). ``found``, ``nodes`` and
    ``order`` (the gate's CUDA_DEVICE_ORDER) replace what this machine says (tests)."""
    found = list(gpus() if found is None else found)
    nodes = list(node_names() if nodes is None else nodes)
    order = os.environ.get("CUDA_DEVICE_ORDER") if order is None else order
    token = token.strip()

    def whole(why: str) -> JobGpu:
        return JobGpu(tuple(nodes), token, why)

    if token.startswith("MIG-"):
        return whole("a MIG instance: its sandbox holds every GPU's node")
    if not found:
        return whole("the driver lists no GPU with its minor number (no /proc/driver/nvidia/gpus, no NVML)")
    if token.startswith("GPU-"):
        match = [g for g in found if g.uuid.startswith(token)]
    elif token.isdigit():
        if order not in (None, "", "PCI_BUS_ID"):
            return whole(f"CUDA_DEVICE_ORDER={order} numbers GPUs by speed, which the gate cannot match "
                         f"to device nodes (name GPUs by UUID, or unset it)")
        ranked = sorted(found, key=lambda g: g.bus)
        match = [ranked[int(token)]] if int(token) < len(ranked) else []
    else:
        match = []
    if len(match) != 1:
        return whole(f"CUDA_VISIBLE_DEVICES names {token!r}, which matches "
                     f"{'no' if not match else 'more than one'} GPU the driver lists")
    gpu = match[0]
    own = f"nvidia{gpu.minor}"
    if not any(os.path.basename(n) == own for n in nodes):
        return whole(f"GPU {token}'s device node /dev/{own} does not exist")
    kept = tuple(n for n in nodes
                 if not _GPU_NODE.fullmatch(os.path.basename(n)) or os.path.basename(n) == own)
    return JobGpu(kept, gpu.uuid)
