"""What a job's result carries beyond its findings, as typed fields: what the reports show (the
seed, the rule, what the cases covered and how many were planned, the growth sweep, the size
thresholds, the compile check's resources, what allows a check not run and whether the code alone
decided it) and what the gate's stores take (the launches, the modules imported without bytecode).

In ``results.json`` it is the ``extra`` mapping, each field under its own name and only those that
were set, as it always was: a result written before these fields had types reads the same, and a
key this version does not know is kept as it came (``other``) and written back.
"""
from __future__ import annotations

import dataclasses
from typing import Any

# each field's JSON type: a value of another type read from a result is kept in ``other``
_TYPES: dict[str, type | tuple[type, ...]] = {
    "seed": int, "rule": str, "coverage": dict, "replayed": list, "growth": dict, "timing": dict,
    "specializations": list, "launch_resources": list, "launches": dict, "bytecode_missing": list,
    "resources": list, "linted": list, "cases_planned": int, "thresholds": dict, "magnitudes": dict,
    "launches_linted": list, "not_run_allowed_by": str, "not_run_by_code": str}


@dataclasses.dataclass
class JobExtra:
    seed: int | None = None  # the equivalence check's seed: each case's inputs are made from it
    rule: str | None = None  # the comparison rule, in words
    coverage: dict[str, object] | None = None  # what the cases exercised, per axis (dims, inputs, layouts)
    replayed: list[str] | None = None  # the passed cases run again last, in plain tensors
    growth: dict[str, Any] | None = None  # the error-growth sweep's table
    timing: dict[str, object] | None = None  # where the job's time went, in seconds (never a verdict)
    specializations: list[dict[str, object]] | None = None  # the Triton specializations the cases launched
    launch_resources: list[dict[str, object]] | None = None  # their resources, compiled for the policy's archs
    launches: dict[str, object] | None = None  # what the spec really launched (gpu_gate.coverage's map)
    bytecode_missing: list[str] | None = None  # for the bytecode store; taken off before the result is kept
    resources: list[dict[str, object]] | None = None  # the compile check's resource rows
    linted: list[str] | None = None  # the kernels whose compiled code the compile check read
    cases_planned: int | None = None  # the cases the policy asked for (the report says how many ran)
    thresholds: dict[str, object] | None = None  # the size thresholds read from the wrapper, and those not run
    magnitudes: dict[str, float] | None = None  # the scale each extreme-magnitude case took
    launches_linted: list[str] | None = None  # the kernels whose launched PTX was read (races, 32-bit offsets)
    not_run_allowed_by: str | None = None  # a NOT_RUN result: the policy setting that allows it
    # a NOT_RUN result that the code and the policy decided, no machine taking part (what the job's
    # cache key covers): why. The result cache keeps it like a verdict (the same code is not run again
    # to find the same nothing); any other NOT_RUN (a missing GPU, a tool) is tried again.
    not_run_by_code: str | None = None
    other: dict[str, object] = dataclasses.field(default_factory=dict)  # keys this version does not know

    def to_json(self) -> dict[str, object]:
        out = {k: getattr(self, k) for k in _TYPES if getattr(self, k) is not None}
        return {**out, **{k: v for k, v in self.other.items() if k not in out}}

    @classmethod
    def from_json(cls, d: object) -> JobExtra:
        if not isinstance(d, dict):
            return cls()
        known: dict[str, Any] = {k: v for k, v in d.items()
                                 if k in _TYPES and isinstance(v, _TYPES[k]) and not isinstance(v, bool)}
        return cls(**known, other={k: v for k, v in d.items() if k not in known})

    def copy(self) -> JobExtra:
        return dataclasses.replace(self, other=dict(self.other))
