"""Timing the code under review (the speed check): the judge's ``time`` request and the candidate
worker's reply. The worker times the call it last made (the same case, inputs and upstream gradient)
``repeats`` times after ``warmup`` untimed ones; each repeat on fresh copies of the inputs (new
addresses: a cache keyed by pointers cannot help) and after the GPU's L2 cache was overwritten.

The figures are the worker's word, as everything a worker says is: the code under review runs in
that process and could rewrite the clock. They feed an advisory comparison of speed, never a verdict
of correctness (see ``gpu_gate.judge.checks.speed``)."""
from __future__ import annotations

import dataclasses
import math
from typing import ClassVar

from ..wire import BadMessage
from .fields import Fields, items, number
from .tensors import Ledger

MAX_REPEATS = 1000
MAX_WARMUP = 100


@dataclasses.dataclass(frozen=True)
class Time:
    """Time the last call again: ``repeats`` timed runs after ``warmup`` untimed ones. ``fresh``:
    each run on new copies of the inputs; ``flush``: the L2 cache overwritten before each run."""

    repeats: int
    warmup: int = 1
    fresh: bool = True
    flush: bool = True
    op: ClassVar[str] = "time"

    def to_json(self) -> dict[str, object]:
        return {"op": self.op, "repeats": self.repeats, "warmup": self.warmup, "fresh": self.fresh,
                "flush": self.flush}

    @classmethod
    def from_json(cls, d: object, blobs: Ledger) -> Time:
        f = Fields(d, "time")
        return cls(f.integer("repeats", 1, MAX_REPEATS), f.integer("warmup", 0, MAX_WARMUP),
                   f.flag("fresh", True), f.flag("flush", True))


@dataclasses.dataclass(frozen=True)
class Timed:
    """Each timed run's seconds, in order; how they were taken (``cuda-events`` on a GPU, ``wall``
    on the CPU); the SM clock at the end where the driver says it (MHz), and the bytes overwritten
    to flush the L2 cache (0: not flushed)."""

    seconds: tuple[float, ...]
    how: str
    clock_mhz: float | None = None
    flushed_bytes: int = 0
    op: ClassVar[str] = "time"

    def to_json(self) -> dict[str, object]:
        return {"op": self.op, "seconds": list(self.seconds), "how": self.how, "clock_mhz": self.clock_mhz,
                "flushed_bytes": self.flushed_bytes}

    @classmethod
    def from_json(cls, d: object, blobs: Ledger) -> Timed:
        f = Fields(d, "time reply")
        seconds = tuple(number(v, f"time reply seconds[{i}]")
                        for i, v in enumerate(items(f.get("seconds", []), "time reply seconds")))
        if not seconds or len(seconds) > MAX_REPEATS:
            raise BadMessage(f"time reply: {len(seconds)} timings (1 to {MAX_REPEATS})")
        if not all(math.isfinite(s) and s > 0 for s in seconds):
            raise BadMessage("time reply: a timing that is not a positive finite number of seconds")
        how = f.text("how", 32)
        if how not in ("cuda-events", "wall"):
            raise BadMessage(f"time reply: unknown timing method {how!r}")
        clock = None if f.get("clock_mhz") is None else f.number("clock_mhz")
        return cls(seconds, how, clock, f.integer("flushed_bytes", 0, 1 << 40))
