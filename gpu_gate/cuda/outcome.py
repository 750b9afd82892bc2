"""The result type that checks return, and the contexts they are given.

``Outcome`` is the harness's (``gpu_gate.harness.Outcome``) when that module
exists. Until then a local dataclass of the same shape stands in::

    Outcome(status: Status, findings: list[Finding], cases: int = 0,
            reason: str | None = None, extra: dict = {})

The contexts are Protocols: the harness and the executor pass objects with at
least these attributes.
"""
from __future__ import annotations

import dataclasses
import importlib
from pathlib import Path
from typing import Any, Protocol

from ..findings import Finding, Status


class Context(Protocol):
    """What ``run(job, ctx)`` needs from the harness: where the repository is."""

    repo_root: Path


class WrapContext(Protocol):
    """What ``wrap``/``collect`` need from the executor.

    Optional attributes, read with ``getattr``: ``has_gpu: bool | None`` (None or
    absent: detect through NVML), ``sanitizer_path: str | None`` (the policy's
    path to compute-sanitizer), ``env: dict[str, str]`` (the subprocess
    environment; ``wrap`` adds the variables of its contract to it).
    """

    repo_root: Path


@dataclasses.dataclass
class _LocalOutcome:
    status: Status
    findings: list[Finding] = dataclasses.field(default_factory=list)
    cases: int = 0
    reason: str | None = None
    extra: dict[str, Any] = dataclasses.field(default_factory=dict)


def _outcome_class() -> Any:
    try:
        module = importlib.import_module("gpu_gate.harness")
    except ModuleNotFoundError as exc:
        if exc.name != "gpu_gate.harness":
            raise
        return _LocalOutcome
    return getattr(module, "Outcome", _LocalOutcome)


Outcome: Any = _outcome_class()


def make_outcome(
    status: Status,
    findings: list[Finding] | None = None,
    *,
    cases: int = 0,
    reason: str | None = None,
    extra: dict[str, Any] | None = None,
) -> Any:
    """Build an Outcome with keyword arguments only, so either class fits."""
    return Outcome(status=status, findings=list(findings or []), cases=cases, reason=reason, extra=dict(extra or {}))
