"""The worker makes its CUDA context while the spec imports; settings that the spec's import sets
too late for it are reported, not silently dropped."""
from __future__ import annotations

import types

import pytest

from gpu_gate.findings import Severity
from gpu_gate.judge.job import _late_settings_note
from gpu_gate.protocol.jobs import Job, SpecRef
from gpu_gate.worker.serve import CudaContext


def test_settings_the_import_sets_after_the_context_was_made_are_named(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CUDA_MODULE_LOADING", "LAZY")
    monkeypatch.delenv("PYTORCH_CUDA_ALLOC_CONF", raising=False)
    ctx = CudaContext()  # without a GPU the context is not made; the first case reports that
    ctx.thread.join()
    assert ctx.late_settings() == []
    monkeypatch.setenv("PYTORCH_CUDA_ALLOC_CONF", "expandable_segments:True")  # as a spec's import might
    monkeypatch.setenv("CUDA_MODULE_LOADING", "EAGER")
    monkeypatch.setenv("TRITON_CACHE_DIR", "/elsewhere")  # read by Triton when it compiles: in time
    assert ctx.late_settings() == ["CUDA_MODULE_LOADING", "PYTORCH_CUDA_ALLOC_CONF"]


def test_the_job_warns_of_them_and_says_where_they_belong() -> None:
    job = Job(id="j", check="equivalence", level="required", kernels=(), spec=SpecRef("gate/a.py", "a"))
    ctx = types.SimpleNamespace(workers=types.SimpleNamespace(late_cuda_settings=["PYTORCH_CUDA_ALLOC_CONF"]))
    (f,) = _late_settings_note(job, ctx)  # type: ignore[arg-type]
    assert f.kind == "late-cuda-settings" and f.severity is Severity.WARNING
    assert "PYTORCH_CUDA_ALLOC_CONF" in f.message and "runner's environment" in f.message
    none = types.SimpleNamespace(workers=types.SimpleNamespace(late_cuda_settings=[]))
    assert _late_settings_note(job, none) == []  # type: ignore[arg-type]
