"""A job's workers in the caller's own process: for gpu-gate's tests and for ``gg.check`` in a
library's own test suite, where the caller runs the code under review anyway.

There is no sandbox here, and the reference cannot be kept apart from the candidate's imports (the
spec module is imported once, with the repository's real modules): a merge gate runs its jobs
through the executor (:mod:`gpu_gate.executor`), whose workers each run in a sandbox of their own.
The messages still cross as bytes (:class:`~gpu_gate.judge.channel.LocalChannel`), so the judge's
side is the same code either way.
"""
from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING

from .judge import job as judged
from .judge.channel import LocalChannel
from .protocol.jobs import Job
from .protocol.roles import COMPILER
from .worker.serve import Worker

if TYPE_CHECKING:
    from .judge.channel import Channel


@dataclasses.dataclass
class Context(judged.Context):
    """The judge's context, with its workers made in this process when it opens them."""

    def local_channels(self) -> dict[str, Channel]:
        context = {"repo_root": str(self.repo_root), "device": self.device}
        candidate = Worker("candidate", context, self.workdir, isolate=False)
        reference = Worker("reference", context, self.workdir, isolate=False, borrow=candidate)
        return {"candidate": LocalChannel(candidate, "candidate"), "reference": LocalChannel(reference, "reference")}

    def local_compile_channels(self, job: Job) -> dict[str, Channel]:
        """The compile check's worker, in this process: the kernel files' modules are imported here.
        There is no base's tree here, so nothing is compared with the base's build."""
        from .worker.compile import CompileWorker

        worker = CompileWorker({"repo_root": str(self.repo_root)}, self.workdir)
        return {COMPILER: LocalChannel(worker, COMPILER)}


def main(argv: list[str] | None = None) -> int:
    """``python -m gpu_gate.inprocess JOB.json RESULT.json``: one job, judged with its workers in this
    process (see the module's docstring: no sandbox)."""
    return judged.main(argv, Context)


if __name__ == "__main__":
    import sys

    from gpu_gate.inprocess import main as _main

    sys.exit(_main())
