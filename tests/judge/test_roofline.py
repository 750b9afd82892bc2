"""The roofline's memory side (gpu_gate.judge.roofline), without a GPU: the write floor's arithmetic,
and the GPU's memory figures read from (fake) PyTorch device properties, else NVML, else none."""
from __future__ import annotations

import types

import pytest

from gpu_gate.judge import roofline
from gpu_gate.judge.roofline import Memory, write_floor_s

GiB = 1 << 30
L2 = 62914560  # an H200's 60 MiB
H200 = Memory(bandwidth=4.8e12, l2_bytes=L2, source="test")


def test_outputs_that_fit_in_l2_have_no_floor() -> None:
    assert write_floor_s(0, H200) == 0
    assert write_floor_s(1 << 20, H200) == 0
    assert write_floor_s(L2, H200) == 0


def test_a_gibibyte_beyond_l2_takes_about_a_fifth_of_a_millisecond() -> None:
    floor = write_floor_s(L2 + GiB, H200)
    assert floor == pytest.approx(GiB / 4.8e12)
    assert floor == pytest.approx(0.224e-3, rel=0.01)


def test_the_floor_grows_with_the_outputs_and_shrinks_with_the_bandwidth() -> None:
    sizes = [0, L2 // 2, L2, L2 + 1, L2 + GiB, L2 + 4 * GiB, 100 * GiB]
    floors = [write_floor_s(n, H200) for n in sizes]
    assert floors == sorted(floors) and floors[-1] > floors[-2] > floors[3] > 0
    faster = Memory(bandwidth=2 * H200.bandwidth, l2_bytes=L2, source="test")
    assert write_floor_s(L2 + GiB, faster) == pytest.approx(write_floor_s(L2 + GiB, H200) / 2)


def test_describe_says_the_bandwidth_the_l2_and_the_source() -> None:
    text = H200.describe()
    assert "4.80 TB/s" in text and "60 MiB" in text and "test" in text, text


def _props(**kw: int) -> object:
    return types.SimpleNamespace(**kw)


@pytest.fixture
def torch_cuda():  # type: ignore[no-untyped-def]
    torch = pytest.importorskip("torch")
    return torch.cuda


def test_memory_from_pytorchs_device_properties(monkeypatch, torch_cuda) -> None:  # type: ignore[no-untyped-def]
    props = _props(memory_clock_rate=3201000, memory_bus_width=6016, L2_cache_size=L2)  # as an H200 reports
    monkeypatch.setattr(torch_cuda, "get_device_properties", lambda i=0: props)
    monkeypatch.setattr(roofline, "_nvml", lambda i: pytest.fail("NVML asked although PyTorch said"))
    m = roofline.memory()
    assert m is not None
    assert m.bandwidth == pytest.approx(2 * 3201000e3 * 6016 / 8)
    assert m.bandwidth == pytest.approx(4.81e12, rel=0.005)
    assert m.l2_bytes == L2
    assert m.source == "PyTorch's device properties"
    assert "4.81 TB/s" in m.describe() and "60 MiB" in m.describe()


@pytest.mark.parametrize("props", [_props(memory_bus_width=6016, L2_cache_size=L2),
                                   _props(memory_clock_rate=0, memory_bus_width=6016, L2_cache_size=L2),
                                   _props(memory_clock_rate=3201000, memory_bus_width=0, L2_cache_size=L2)])
def test_no_figures_and_no_nvml_give_no_memory(monkeypatch, torch_cuda, props) -> None:  # type: ignore[no-untyped-def]
    monkeypatch.setattr(torch_cuda, "get_device_properties", lambda i=0: props)
    monkeypatch.setattr(roofline, "_nvml", lambda i: (0, 0, ""))
    assert roofline.memory() is None


def test_nvml_stands_in_where_pytorch_does_not_say(monkeypatch, torch_cuda) -> None:  # type: ignore[no-untyped-def]
    props = _props(L2_cache_size=L2)
    monkeypatch.setattr(torch_cuda, "get_device_properties", lambda i=0: props)
    monkeypatch.setattr(roofline, "_nvml", lambda i: (3201000, 6016, "NVML"))
    m = roofline.memory()
    assert m is not None and m.source == "NVML" and m.l2_bytes == L2
    assert m.bandwidth == pytest.approx(4.81e12, rel=0.005)


def test_no_device_gives_no_memory(monkeypatch, torch_cuda) -> None:  # type: ignore[no-untyped-def]
    def boom(i: int = 0) -> object:
        raise RuntimeError("Found no NVIDIA driver on your system")

    monkeypatch.setattr(torch_cuda, "get_device_properties", boom)
    assert roofline.memory() is None
