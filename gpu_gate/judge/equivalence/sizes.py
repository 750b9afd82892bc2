"""The size thresholds of a job's spec, read on the judge's side from source text.

The judge never imports the code under review: it reads the spec module (the base's, where the job
carries it) and the repository modules its candidate calls, from the head's tree the workers run
(:mod:`gpu_gate.shapescan`). What it finds goes into the schedule as plain data; the result lists it,
with the sides that could not run here.
"""
from __future__ import annotations

from pathlib import Path

from ...protocol.jobs import Job, carried
from ...protocol.shapes import Threshold
from ...spec import Spec, Tensor
from ... import shapescan


def read(job: Job, spec: Spec, repo_root: Path) -> tuple[tuple[Threshold, ...], dict[str, object]]:
    """The thresholds, and what the reading says of itself (for ``extra.thresholds``)."""
    assert job.spec is not None
    base = carried(job)
    source = base["source"] if base is not None else None
    inputs = {n: tuple(t.shape) for n, t in spec.inputs.items() if isinstance(t, Tensor)}
    try:
        reading = shapescan.read_thresholds(repo_root, job.spec.file, job.spec.name, inputs, spec.dim_args,
                                            job.python_path, source=source)
    except (RecursionError, ValueError) as exc:  # a reading that breaks down reads nothing, and says so
        return (), {"found": [], "read": [], "why": f"the wrapper could not be read: {exc}"}
    info: dict[str, object] = {"found": [{"where": t.where, "text": t.text,
                                       "conditions": [" and ".join(a.text() for a in c) for c in t.any_of]}
                                      for t in reading.thresholds],
                            "read": reading.files}
    if reading.why:
        info["why"] = reading.why
    return tuple(reading.thresholds), info
