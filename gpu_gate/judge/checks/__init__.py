"""The registry of checks: one entry per check, with the traits the gate plans, schedules, contains and
reports it by. Whatever asks "which checks ..." reads a trait here, never a list of names of its own.
Every entry's module satisfies :class:`~gpu_gate.judge.checks.base.Check` (and, for a check that
wraps a tool, :class:`~gpu_gate.judge.checks.base.WrappingCheck`); the type checker holds them to it
below. The policy's ``checks:`` names are validated against this registry (gpu_gate.policy.models).

This module must stay import-light (no torch): ``plan`` and ``validate-policy`` read the registry on
machines without a GPU stack. A check's module is imported only when a job runs it (``load``).
"""
from __future__ import annotations

import dataclasses
import importlib
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Literal, cast

from .base import Check, WrappingCheck

Scope = Literal["spec", "kernel"]  # one job per gate spec, or per changed kernel file
# What a pull request's job compares with the base's: the same cases run on the base's code, or
# the base's build of the same kernel files. Either way a finding is new, pre-existing or fixed.
Differential = Literal["cases", "build"]
Memory = Literal["cases", "fixed"]  # GPU memory a job takes: by its case budget, or a fixed allowance
Tool = Literal["compute-sanitizer"]


@dataclasses.dataclass(frozen=True)
class Compiler:
    """What a check asks of the compilers."""

    cuda_flags: bool = False  # the policy's cuda.include_dirs, nvcc_flags and nvcc go into its options
    builds: bool = False  # it builds the kernels itself: Triton's real compiler (never the interpreter), nvcc for CUDA C
    launched: bool = False  # on a GPU it compiles the Triton specializations its cases launch (compile's settings)


@dataclasses.dataclass(frozen=True)
class CheckInfo:
    name: str
    scope: Scope
    summary: str
    module: str
    needs_gpu: bool
    runs_candidate: bool  # it calls the kernels under review on cases; their autotuning follows the policy's
    differential: Differential | None
    tool: Tool | None  # the tool the candidate's worker runs under, outside the worker's sandbox
    memory: Memory
    compiler: Compiler
    cost: float  # relative cost estimate in seconds, used to balance shards
    cost_cases: int | None = None  # ``cost`` is for this many cases: a job's ``cases`` option scales it

    @property
    def in_process(self) -> bool:
        """Whether it can run with its workers in the caller's process (gpu_gate.testing): it runs
        the candidate, under no tool of its own."""
        return self.runs_candidate and self.tool is None

    def load(self) -> Check:
        return cast(Check, importlib.import_module(self.module))

    def wrapping(self) -> WrappingCheck | None:
        """The module, where the check runs the candidate's worker under a tool."""
        return cast(WrappingCheck, importlib.import_module(self.module)) if self.tool is not None else None

    def cost_for(self, options: Mapping[str, Any]) -> float:
        if self.cost_cases is None:
            return self.cost
        return self.cost * max(1, int(options.get("cases", self.cost_cases))) / self.cost_cases


def _sanitizer(name: str, cost: float, summary: str) -> CheckInfo:
    return CheckInfo(name, scope="spec", summary=f"compute-sanitizer {name}: {summary}",
                     module="gpu_gate.judge.checks.sanitizer", needs_gpu=True, runs_candidate=True,
                     differential="cases", tool="compute-sanitizer", memory="fixed",
                     compiler=Compiler(cuda_flags=True), cost=cost)


CHECKS: dict[str, CheckInfo] = {c.name: c for c in (
    CheckInfo("compile", scope="kernel", summary="the kernel compiles for the target architectures; resource usage",
              module="gpu_gate.judge.checks.compile", needs_gpu=False, runs_candidate=False, differential="build",
              tool=None, memory="fixed", compiler=Compiler(cuda_flags=True, builds=True), cost=5.0),
    CheckInfo("equivalence", scope="spec", summary="fuzzed inputs against a float64 reference",
              module="gpu_gate.judge.checks.equivalence", needs_gpu=False, runs_candidate=True,
              differential="cases", tool=None, memory="cases", compiler=Compiler(launched=True), cost=30.0,
              cost_cases=64),
    CheckInfo("determinism", scope="spec", summary="repeated runs, alone and under concurrent load",
              module="gpu_gate.judge.checks.determinism", needs_gpu=True, runs_candidate=True,
              differential="cases", tool=None, memory="cases", compiler=Compiler(), cost=20.0),
    _sanitizer("memcheck", 40.0, "out-of-bounds and misaligned accesses"),
    _sanitizer("racecheck", 60.0, "shared-memory races"),
    _sanitizer("synccheck", 40.0, "invalid barrier use"),
    _sanitizer("initcheck", 40.0, "reads of uninitialised global memory"),
    CheckInfo("speed", scope="spec", summary="the head's time against the base's on the same cases, with its interval",
              module="gpu_gate.judge.checks.speed", needs_gpu=False, runs_candidate=True, differential="cases",
              tool=None, memory="cases", compiler=Compiler(), cost=30.0),
)}


def check_info(name: str) -> CheckInfo | None:
    """The entry of ``name``, or None for a name no check has (a finding's ``check`` may be
    ``coverage``, ``rules``, ``doctor``, ...)."""
    return CHECKS.get(name)


if TYPE_CHECKING:  # every registered module satisfies the interface, checked by the type checker
    from . import compile as _compile, determinism as _determinism, equivalence as _equivalence
    from . import sanitizer as _sanitizer_module, speed as _speed

    _CHECKED: tuple[Check, ...] = (_compile, _equivalence, _determinism, _sanitizer_module, _speed)
    _WRAPPING: tuple[WrappingCheck, ...] = (_sanitizer_module,)
