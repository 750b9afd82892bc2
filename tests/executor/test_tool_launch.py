"""The ways around compute-sanitizer's crashes and the bwrap-init hang, switched on by the
runner's GPU_GATE_TOOL_LAUNCH: each starts and judges a watched sandbox as the plain start does
(real bwrap, the stand-in tool of test_sanitizer_outside). Whether they remove the hang and the
crashes is measured on a GPU (bench/bench_red_noise.py)."""
from __future__ import annotations

import os
from pathlib import Path

import pytest

from gpu_gate.cuda.tool_launch import tool_options
from gpu_gate.executor import sandbox, tool_launch
from gpu_gate.findings import Status
from test_sanitizer_outside import BWRAP, _gate, _memcheck, cpu_sanitizer, needs_bwrap  # noqa: F401
from test_sandbox import _ids


@needs_bwrap
@pytest.mark.parametrize("box", BWRAP, ids=_ids(BWRAP))
def test_a_watched_bwrap_that_reads_its_options_from_a_pipe_runs_and_is_judged(
        tmp_path: Path, box: sandbox.Available, cpu_sanitizer: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GPU_GATE_TOOL_LAUNCH", "args-pipe")
    fed: list[tool_launch.ArgFeed] = []
    real = tool_launch.feed

    def spy(*a: object) -> tool_launch.ArgFeed | None:
        f = real(*a)  # type: ignore[arg-type]
        if f is not None:
            fed.append(f)
        return f

    monkeypatch.setattr(tool_launch, "feed", spy)
    honest = _memcheck(tmp_path / "repo", "honest", False)
    clean = _gate(tmp_path, cpu_sanitizer, honest, box, False, monkeypatch)
    assert clean.status is Status.PASSED, (clean.reason, clean.findings)
    red = _gate(tmp_path, cpu_sanitizer, honest, box, True, monkeypatch)
    assert red.status is Status.FAILED and "invalid-global-read" in {f.kind for f in red.findings}, red.findings
    # the pipe was filled once its bwrap was asleep, well within the start limit
    assert len(fed) == 2 and all(f.settled_s is not None and f.settled_s < tool_launch.SETTLE_LIMIT_S for f in fed)


def test_without_the_switch_nothing_changes(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("GPU_GATE_TOOL_LAUNCH", raising=False)
    every = frozenset({"--target-processes-filter", "--force-blocking-launches"})
    assert tool_options(every, "python3.12") == []
    monkeypatch.setenv("GPU_GATE_TOOL_LAUNCH", "filter,blocking")
    assert tool_options(every, "python3.12") == ["--target-processes-filter", "python3.12",
                                                 "--force-blocking-launches"]
    assert tool_options(frozenset(), "python3.12") == []  # a release without them: the plain start
