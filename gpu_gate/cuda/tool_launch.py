"""Which ways around compute-sanitizer's crashes and the bwrap-init hang a run switches on (the
runner's ``GPU_GATE_TOOL_LAUNCH``; see gpu_gate.executor.tool_launch), and the tool options they add."""
from __future__ import annotations

import os

MODES = ("plain", "args-pipe", "filter", "blocking")
ENV = "GPU_GATE_TOOL_LAUNCH"


def modes() -> frozenset[str]:
    """The ways switched on for this run (unknown words are ignored: ``plain`` is the default)."""
    words = {w.strip() for w in os.environ.get(ENV, "plain").split(",")}
    return frozenset(w for w in words if w in MODES and w != "plain")


def tool_options(supported: frozenset[str] | set[str], worker: str) -> list[str]:
    """compute-sanitizer options for the switched-on ways the tool supports; ``worker``: the
    worker interpreter's executable name."""
    on = modes()
    out: list[str] = []
    if "filter" in on and "--target-processes-filter" in supported:
        out += ["--target-processes-filter", worker]
    if "blocking" in on and "--force-blocking-launches" in supported:
        out += ["--force-blocking-launches"]
    return out
