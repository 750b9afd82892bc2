"""The judge's own arithmetic on a determinism case: in slices, and on the CPU where the GPU is full.

On an H200 shared with another gate, the judge's float64 difference of a 4 GiB contention output
ran out of GPU memory and the job crashed (``torch.OutOfMemoryError`` out of ``_error``). Running
out of memory in the judge says nothing of the kernel."""
from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from gpu_gate.judge.checks import determinism  # noqa: E402


def test_the_difference_is_the_same_taken_in_slices(monkeypatch: pytest.MonkeyPatch) -> None:
    g = torch.Generator().manual_seed(0)
    out = torch.randn(37, 5, 3, generator=g, dtype=torch.float32)
    ref = out.to(torch.float64) + torch.randn(37, 5, 3, generator=g, dtype=torch.float64) * 1e-3
    whole = float((out.double() - ref).abs().max())
    monkeypatch.setattr(determinism, "_SLICE", 7)  # slices of one or two rows
    assert determinism._error(out, ref) == whole
    out[20, 4, 2] = float("nan")
    assert determinism._error(out, ref) == float("inf")
    assert determinism._error(torch.tensor(2.0), torch.tensor(0.5, dtype=torch.float64)) == 1.5


def test_the_gpu_running_out_of_memory_moves_the_difference_to_the_cpu(monkeypatch: pytest.MonkeyPatch) -> None:
    out = torch.arange(12, dtype=torch.float32).reshape(3, 4)
    ref = out.to(torch.float64)
    ref[1, 2] += 0.25
    where: list[str] = []
    real = determinism._max_abs_diff

    def full_then_fine(a: object, b: object, device: object) -> float:
        where.append(str(device))
        if len(where) == 1:
            raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 64.00 MiB.")
        return real(a, b, device)

    monkeypatch.setattr(determinism, "_max_abs_diff", full_then_fine)
    assert determinism._error(out, ref) == 0.25
    assert where == ["cpu", "cpu"]  # the first try on the output's device, then the CPU


def test_other_errors_are_not_taken_for_memory(monkeypatch: pytest.MonkeyPatch) -> None:
    def broken(a: object, b: object, device: object) -> float:
        raise RuntimeError("an illegal memory access was encountered")

    monkeypatch.setattr(determinism, "_max_abs_diff", broken)
    with pytest.raises(RuntimeError, match="illegal memory access"):
        determinism._error(torch.zeros(2), torch.zeros(2, dtype=torch.float64))
