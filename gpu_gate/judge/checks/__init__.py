"""The registry of checks. One module per check; every module exposes the same interface.

This module must stay import-light (no torch): ``plan`` and ``validate-policy``
read the registry on machines without a GPU stack.

Interface of a check module (``gpu_gate.judge.checks.<name>``)::

    def run(job: Job, ctx: Context) -> Outcome
        # Runs inside the harness subprocess (python -m gpu_gate.judge.job).
        # Returns data; never prints.

Optionally, for checks that run the worker under another tool (compute-sanitizer)::

    def wrap(job: Job, workdir: Path, ctx: WrapContext) -> list[str] | Outcome
        # Runs in the executor. Returns the tool's command line, which the executor runs outside
        # the worker's sandbox with the sandbox as its program (gpu_gate.executor.sandbox.wrap), or an
        # Outcome when the tool cannot run (not found => fail closed).
    def collect(job: Job, workdir: Path, proc: ProcResult, inner: Outcome | None) -> Outcome
        # Runs in the executor after the workers; parses the tool's output.
"""
from __future__ import annotations

import dataclasses
import importlib
from types import ModuleType
from typing import Literal

Scope = Literal["spec", "kernel"]


@dataclasses.dataclass(frozen=True)
class CheckInfo:
    name: str
    scope: Scope  # "spec": one job per gate spec; "kernel": one job per changed kernel file
    needs_gpu: bool
    cost: float  # relative cost estimate in seconds, used to balance shards
    module: str
    summary: str

    def load(self) -> ModuleType:
        return importlib.import_module(self.module)


def _info(name: str, scope: Scope, needs_gpu: bool, cost: float, module: str, summary: str) -> CheckInfo:
    return CheckInfo(name, scope, needs_gpu, cost, f"gpu_gate.judge.checks.{module}", summary)


CHECKS: dict[str, CheckInfo] = {
    c.name: c
    for c in (
        _info("compile", "kernel", False, 5.0, "compile", "the kernel compiles for the target architectures; resource usage"),
        _info("equivalence", "spec", False, 30.0, "equivalence", "fuzzed inputs against a float64 reference"),
        _info("determinism", "spec", True, 20.0, "determinism", "repeated runs, alone and under concurrent load"),
        _info("memcheck", "spec", True, 40.0, "sanitizer", "compute-sanitizer memcheck: out-of-bounds and misaligned accesses"),
        _info("racecheck", "spec", True, 60.0, "sanitizer", "compute-sanitizer racecheck: shared-memory races"),
        _info("synccheck", "spec", True, 40.0, "sanitizer", "compute-sanitizer synccheck: invalid barrier use"),
        _info("initcheck", "spec", True, 40.0, "sanitizer", "compute-sanitizer initcheck: reads of uninitialised global memory"),
    )
}

SANITIZER_TOOLS = ("memcheck", "racecheck", "synccheck", "initcheck")
