"""NVML PCIe byte counters read in the sampler's tick: one field-values call per device per tick.

Uses the recorded H200 stand-in of tests/test_telemetry_nvml.py (Gen5 x16, 63.0 GB/s peak, so
a 4 GiB wrap every 68 ms at full speed).
"""
from __future__ import annotations

import importlib.util
from pathlib import Path
from types import SimpleNamespace

import pytest

from gcdoctor.telemetry import TelemetrySampler
from gcdoctor.telemetry.nvml import FieldReader, NvmlSource

_spec = importlib.util.spec_from_file_location("nvml_fake", Path(__file__).with_name("test_telemetry_nvml.py"))
_fake = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_fake)
FakeNvml, H200 = _fake.FakeNvml, _fake.H200

WRAP = 2 ** 32


@pytest.fixture(autouse=True)
def _no_visible_devices(monkeypatch):
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)


class Clock:
    def __init__(self):
        self.t = 100.0

    def __call__(self):
        return self.t


def test_one_field_values_call_per_tick_unwraps_across_the_wrap_at_20_hz():
    # 50 GB/s RX and 2 GB/s TX, in 50 ms ticks (NVML timestamps in us): RX wraps every ~1.7 ticks
    start_rx, start_tx = WRAP - 100, 7
    polls = [(1_000_000, start_tx, start_rx)]  # the probe at open
    polls += [(2_000_000 + 50_000 * n, (start_tx + 100_000_000 * n) % WRAP, (start_rx + 2_500_000_000 * n) % WRAP)
              for n in range(4)]  # reset, then three ticks
    nvml = FakeNvml(pcie_counters=polls)
    src = NvmlSource(0, nvml=nvml)  # pollers allowed: the tick path must start none
    clock = Clock()
    sampler = TelemetrySampler([src], rate_hz=20, clock=clock)
    src.set_rate_hz(20)
    src.reset()
    nvml.field_calls.clear()
    rx = []
    for _ in range(3):
        clock.t += 0.05
        _, values = sampler.sample_once()
        rx.append((values["gpu0.pcie_rx_gbs"], values["gpu0.pcie_tx_gbs"]))
    assert nvml.field_calls == [[186, 197, 198]] * 3
    assert rx == [(pytest.approx(50.0), pytest.approx(2.0))] * 3
    assert values["gpu0.power_w"] == 512.25
    assert src._counters._thread is None
    st = src.static()
    assert st["gpu0.pcie_counter"].startswith("NVML_FI_DEV_PCIE_COUNT_TX/RX_BYTES read at every sample")
    assert (st["gpu0.pcie_counter_ambiguous_intervals"], st["nvml.pcie_counter_polls"]) == (0, 3)
    src.close()


def test_a_late_tick_reads_missing_and_the_next_one_recovers():
    polls = [(1_000_000, 0, 0), (2_000_000, 0, 0),
             (2_080_000, 0, 1_000_000_000),  # 80 ms: at 63 GB/s the link could have wrapped
             (2_130_000, 0, 3_000_000_000)]
    src = NvmlSource(0, nvml=FakeNvml(pcie_counters=polls))
    src.set_rate_hz(20)
    src.reset()
    assert src.read()["gpu0.pcie_rx_gbs"] is None
    assert src.read()["gpu0.pcie_rx_gbs"] == pytest.approx(40.0)  # 2 GB in 50 ms
    assert src.static()["gpu0.pcie_counter_ambiguous_intervals"] == 2  # TX and RX


def test_a_sampler_too_slow_for_the_link_gets_a_poller_thread_and_a_note():
    nvml = FakeNvml(pcie_counters=[(1_000_000, 0, 0)])
    src = NvmlSource(0, nvml=nvml, start_pollers=False)
    assert not src.needs_pcie_thread(20.0)  # 50 ms x 63.0 GB/s = 3.15 GB, under 0.75 x 4 GiB
    assert src.needs_pcie_thread(15.0)  # 66.7 ms: 4.2 GB, no room for a late tick
    src.set_rate_hz(10)
    nvml.field_calls.clear()
    src.read()
    assert nvml.field_calls == [[186]]  # power only: the counters are the poller's
    assert src.static()["gpu0.pcie_counter"] == "NVML_FI_DEV_PCIE_COUNT_TX/RX_BYTES polled at 50 Hz in a thread"
    assert any("10 Hz sampler is too slow" in n for n in src.notes)


def test_an_unknown_link_is_assumed_the_fastest_known():
    no_link = dict(H200, link={"curr_gen": 0, "max_gen": 0, "curr_width": 0, "max_width": 0})
    src = NvmlSource(0, nvml=FakeNvml(devices=[no_link], pcie_counters=[(1, 0, 0)]), start_pollers=False)
    assert src.needs_pcie_thread(20.0)  # Gen6 x16 (121 GB/s) wraps 4 GiB in 35 ms


def test_field_reader_builds_the_ctypes_array_once_and_reuses_it():
    pynvml = pytest.importorskip("pynvml")
    seen = []

    def c_fn(handle, n, arr):  # stands in for the C function: fills the caller's array
        seen.append((handle, n.value, id(arr), [arr[i].fieldId for i in range(n.value)]))
        for i in range(n.value):
            arr[i].valueType, arr[i].nvmlReturn, arr[i].value.uiVal = 1, 0, 1000 + i
        return 0 if len(seen) < 3 else 999

    module = SimpleNamespace(c_nvmlFieldValue_t=pynvml.c_nvmlFieldValue_t, NVMLError=pynvml.NVMLError,
                             _nvmlGetFunctionPointer=lambda name: c_fn)
    reader = FieldReader(module, "h0", [186, 197, 198])
    assert reader.prebuilt
    first = reader.read()
    second = reader.read()
    assert first is second
    assert [fv.value.uiVal for fv in second] == [1000, 1001, 1002]
    assert seen[0][:2] == ("h0", 3) and seen[0][2] == seen[1][2] and seen[1][3] == [186, 197, 198]
    with pytest.raises(pynvml.NVMLError):
        reader.read()
