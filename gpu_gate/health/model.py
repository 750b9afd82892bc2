"""The doctor's records: the thresholds a runner is held to, and what it found of each GPU and tool."""
from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

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

    def to_json(self) -> dict[str, object]:
        d = dataclasses.asdict(self)
        d["healthy"] = self.healthy
        return d



ToolProbe = Callable[[bool, Thresholds], dict[str, ToolInfo]]
