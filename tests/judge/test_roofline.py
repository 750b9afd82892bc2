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


def _arch_props(major: int, minor: int, sms: int, clock_khz: int = 0) -> object:
    import types

    return types.SimpleNamespace(major=major, minor=minor, multi_processor_count=sms, clock_rate=clock_khz)


def test_the_arithmetic_peak_of_an_h100_from_its_sms_clock_and_architecture() -> None:
    from gpu_gate.judge.roofline import compute_floor_s, compute_from

    h100, why = compute_from(_arch_props(9, 0, 132), nvml_clock_khz=1_980_000)
    assert h100 is not None and not why
    # 132 SMs x 1.98 GHz x 4096 FLOP per SM and clock: 1070 TFLOP/s in bfloat16, above the published 989
    assert h100.peak("bfloat16") == pytest.approx(132 * 1.98e9 * 4096)
    assert h100.peak("float8_e4m3fn") == 2 * h100.peak("float16") == 4 * h100.peak("float32")
    assert h100.peak("float64") == h100.peak("float32")  # the TF32 rate: above anything wider can do
    # a quarter of a 256 x 2^20 x 256 bfloat16 product's operations at that peak
    flops = 2 * 256 * (1 << 20) * 256
    assert compute_floor_s(flops, "bfloat16", h100) == pytest.approx(0.25 * flops / h100.peak("bfloat16"))
    assert compute_floor_s(0, "bfloat16", h100) == 0.0
    assert "sm_90" in h100.describe("bfloat16") and "NVML" in h100.describe("bfloat16")
    # PyTorch's clock where NVML says none
    via_torch, _ = compute_from(_arch_props(9, 0, 132, clock_khz=1_755_000), nvml_clock_khz=0)
    assert via_torch is not None and via_torch.clock_hz == 1.755e9 and "PyTorch" in via_torch.source


def test_no_arithmetic_floor_where_the_figures_are_unknown() -> None:
    from gpu_gate.judge.roofline import compute_from

    unknown, why = compute_from(_arch_props(13, 0, 200), nvml_clock_khz=2_000_000)
    assert unknown is None and "sm_130" in why
    no_clock, why = compute_from(_arch_props(9, 0, 132), nvml_clock_khz=0)
    assert no_clock is None and "clock" in why


def test_every_published_part_is_under_its_architectures_peak() -> None:
    """The table's rates are upper bounds: NVIDIA's published dense peaks of parts of each architecture
    (TFLOP/s: FP16/BF16 tensor, FP8 or INT8 tensor) are at most the peak gpu-gate computes from their SMs
    and boost clock."""
    from gpu_gate.judge.roofline import compute_from

    parts = [  # (architecture, SMs, boost MHz, 16-bit dense, 8-bit dense)
        ((7, 0), 80, 1530, 125, None),     # V100 SXM2
        ((7, 5), 40, 1590, 65, 130),       # T4
        ((8, 0), 108, 1410, 312, 624),     # A100
        ((8, 6), 82, 1695, 142, 284),      # RTX 3090 (FP16 accumulate)
        ((8, 9), 142, 2520, 362, 733),     # L40S
        ((9, 0), 132, 1830, 989, 1979),    # H100 SXM
        ((10, 0), 148, 1965, 2250, 4500),  # B200
    ]
    for arch, sms, mhz, sixteen, eight in parts:
        got, _ = compute_from(_arch_props(*arch, sms), nvml_clock_khz=mhz * 1000)
        assert got is not None
        # the published figures are rounded (A100: 108 x 1.41 GHz x 2048 = 311.9, published as 312)
        assert got.peak("bfloat16") >= 0.995 * sixteen * 1e12, arch
        if eight is not None:
            assert got.peak("float8_e4m3fn") >= 0.995 * eight * 1e12, arch
