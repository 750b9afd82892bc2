"""The interface every check module satisfies (the registry, :mod:`gpu_gate.judge.checks`, is typed
against it). Import-light: the types it names are read by the type checker only."""
from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    from ...proc import ProcResult
    from ...protocol.jobs import Job
    from ..job import Context, Outcome
    from .outcome import BaseRun, WrapContext


class Check(Protocol):
    """A check module (``gpu_gate.judge.checks.<module>``)."""

    def run(self, job: Job, ctx: Context) -> Outcome:
        """Runs in the job's judge (``python -m gpu_gate.judge.job``), outside the workers' sandbox.
        Returns data; never prints."""
        ...


class WrappingCheck(Check, Protocol):
    """A check that runs the candidate's worker under another tool (compute-sanitizer)."""

    def wrap(self, job: Job, workdir: Path, ctx: WrapContext) -> list[str] | Outcome:
        """In the executor: the tool's command line, which the executor runs outside the worker's
        sandbox with the sandbox as its program (gpu_gate.executor.sandbox.wrap), or an Outcome when
        the tool cannot run (not found: fail closed)."""
        ...

    def collect(self, job: Job, workdir: Path, proc: ProcResult, inner: Outcome | None,
                base: BaseRun | None = None) -> Outcome:
        """In the executor, after the workers: the tool's output read into findings (``base``: the
        base's worker under the same tool, in a differential run)."""
        ...
