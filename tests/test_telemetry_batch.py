"""The sampler's tick only captures; decoding and storing run once a second for the ticks since
(cold-cache Python per wake-up was most of the sampler's cost after the driver call).

Uses the recorded H200 stand-in of tests/test_telemetry_nvml.py and the psutil stand-in of
tests/test_telemetry_slow.py.
"""
from __future__ import annotations

import ctypes
import importlib.util
from pathlib import Path
from types import SimpleNamespace

import pytest

from gcdoctor.telemetry import Source, TelemetrySampler
from gcdoctor.telemetry.host import HostSource
from gcdoctor.telemetry.nvml import FieldReader, NvmlSource


def _load(name):
    spec = importlib.util.spec_from_file_location(name, Path(__file__).with_name(f"{name}.py"))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


_slow = _load("test_telemetry_slow")
WRAP = 2 ** 32


@pytest.fixture(autouse=True)
def _no_visible_devices(monkeypatch):
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)


class ClockedNvml(_slow.CountingNvml):
    """Utilisation = the clock's tenths of a second: a slow read taken late would show it."""

    def __init__(self, clock, **kw):
        super().__init__(**kw)
        self.clock = clock

    def nvmlDeviceGetUtilizationRates(self, h):
        self._call("nvmlDeviceGetUtilizationRates")
        return SimpleNamespace(gpu=int(self.clock.t * 10 + 1e-6) % 100, memory=0)


def _setup(ticks):
    # RX at 50 GB/s: wraps every ~1.7 ticks, so a deferred decode must unwrap with the tick's counters
    polls = [(1_000_000 + 50_000 * n, (7 + 100_000_000 * n) % WRAP, (WRAP - 100 + 2_500_000_000 * n) % WRAP)
             for n in range(ticks + 2)]
    clock = _slow.Clock()
    nvml = ClockedNvml(clock, pcie_counters=polls)
    nv = NvmlSource(0, nvml=nvml, start_pollers=False, clock=clock)
    host = HostSource(psutil_module=_slow.CountingPsutil(ticks + 3), pid=12345, clock=clock)
    seen = []
    sampler = TelemetrySampler([nv, host], rate_hz=20, clock=clock, wall_clock=lambda: 1.7e9 + clock.t,
                               on_sample=lambda t, v: seen.append((t, dict(v))))
    sampler.prepare()
    return sampler, clock, nvml, seen


def test_batched_ticks_store_exactly_what_processing_every_tick_stores():
    ticks = 13
    each, clock_a, _, seen_a = _setup(ticks)
    batched, clock_b, nvml_b, seen_b = _setup(ticks)
    assert batched.batch == 20  # one second of ticks at 20 Hz
    field_calls_per_tick = []
    for _ in range(ticks):
        clock_a.t += 0.05
        clock_b.t += 0.05
        each.sample_once()
        nvml_b.field_calls.clear()
        batched.tick()
        field_calls_per_tick.append(len(nvml_b.field_calls))
    assert field_calls_per_tick == [1] * ticks  # the counters are taken at every tick, not later
    assert batched.samples_taken == 1  # tick 0 processed at once, the rest still pending
    a, b = each.samples(), batched.samples()  # samples() processes what is still pending
    assert b == a
    util = a["gpu0.util_pct"]  # slow reads at the tick (ticks 0, 4, 8, 12), held in between
    assert util == [0.0] * 4 + [2.0] * 4 + [4.0] * 4 + [6.0]
    assert [v["gpu0.pcie_rx_gbs"] for _, v in seen_b] == [pytest.approx(50.0)] * ticks
    assert [t for t, _ in seen_b] == a["t"] and [v for _, v in seen_b] == [v for _, v in seen_a]


def test_the_tick_only_captures_until_the_batch_ends_and_readers_catch_up():
    sampler, clock, nvml, seen = _setup(8)
    stored = []
    for _ in range(4):
        clock.t += 0.05
        sampler.tick()
        stored.append(sampler.samples_taken)
    assert stored == [1, 1, 1, 1]  # tick 0 at once; the others wait for the batch or a reader
    assert len(seen) == 1
    clock.t += 0.01
    t, values = sampler.latest()  # a reader processes the pending ticks itself
    assert t == pytest.approx(100.2) and sampler.samples_taken == 4 and len(seen) == 4
    assert values["gpu0.pcie_rx_gbs"] == pytest.approx(50.0)
    assert sampler.reader_cpu_s >= 0.0
    assert [t for t, _ in seen] == pytest.approx([100.05, 100.1, 100.15, 100.2])  # in order, once each


def test_a_failed_capture_is_a_missing_sample_and_the_next_tick_recovers():
    sampler, clock, nvml, _ = _setup(6)
    real = nvml.nvmlDeviceGetFieldValues
    calls = {"n": 0}

    def flaky(h, ids):  # the driver moves on (the counters advance) but this call's result is lost
        out = real(h, ids)
        calls["n"] += 1
        if calls["n"] == 2:
            raise _slow._nv.NVMLError(999)
        return out

    nvml.nvmlDeviceGetFieldValues = flaky
    for _ in range(4):
        clock.t += 0.05
        sampler.tick()
    data = sampler.samples()
    rx, power = data["gpu0.pcie_rx_gbs"], data["gpu0.power_w"]
    assert rx[0] == pytest.approx(50.0) and rx[1] is None and power[1] is None
    assert rx[2] is None  # spans the lost tick: 100 ms, too long to unwrap at Gen5 x16
    assert rx[3] == pytest.approx(50.0) and power[3] == 512.25


def test_batch_is_one_second_of_ticks_and_a_plain_source_is_read_at_its_tick():
    class Plain(Source):  # overrides read() only: the default capture() reads it at the tick
        name = "plain"

        def __init__(self, clock):
            super().__init__()
            self.series = ["x"]
            self.clock = clock

        def read(self, captured=None):
            return {"x": self.clock.t}

    clock = _slow.Clock()
    sampler = TelemetrySampler([Plain(clock)], rate_hz=10, clock=clock)
    assert sampler.batch == 10
    assert TelemetrySampler([Plain(clock)], rate_hz=20, clock=clock, batch_s=0.2).batch == 4
    sampler.prepare()
    for _ in range(3):
        clock.t += 0.1
        sampler.tick()
    clock.t += 5.0  # processed late: the values are still those read at each tick
    assert sampler.samples()["x"] == pytest.approx([100.1, 100.2, 100.3])


def test_field_reader_capture_copies_the_array_and_decodes_it_later():
    pynvml = pytest.importorskip("pynvml")
    calls = []

    def c_fn(handle, n, arr):  # the C function: fills the caller's array
        calls.append(1)
        for i in range(n.value):
            arr[i].valueType, arr[i].nvmlReturn = 1, 0
            arr[i].timestamp, arr[i].value.uiVal = 1000 * len(calls), 100 * len(calls) + i
        return 0 if len(calls) < 3 else 999

    module = SimpleNamespace(c_nvmlFieldValue_t=pynvml.c_nvmlFieldValue_t, NVMLError=pynvml.NVMLError,
                             _nvmlGetFunctionPointer=lambda name: c_fn)
    reader = FieldReader(module, "h0", [186, 197, 198])
    first, second = reader.capture(), reader.capture()
    assert isinstance(first, bytes) and len(first) == 3 * ctypes.sizeof(pynvml.c_nvmlFieldValue_t)
    a, b = reader.decode(first), reader.decode(second)
    assert [(fv.fieldId, fv.timestamp, fv.value.uiVal) for fv in a] == [(186, 1000, 100), (197, 1000, 101),
                                                                        (198, 1000, 102)]
    assert [fv.value.uiVal for fv in b] == [200, 201, 202]
    with pytest.raises(pynvml.NVMLError):
        reader.capture()


def test_a_late_tick_is_counted_as_missed_and_said_in_the_facts():
    import time as _time

    class Slow(Source):  # the third capture takes 130 ms: 2 ticks of a 20 Hz grid are skipped
        name = "slow"

        def __init__(self):
            super().__init__()
            self.series = ["x"]
            self.n = 0

        def read(self, captured=None):
            self.n += 1
            if self.n == 3:
                _time.sleep(0.13)
            return {"x": float(self.n)}

    sampler = TelemetrySampler([Slow()], rate_hz=20)
    sampler.start()
    deadline = _time.monotonic() + 5.0
    while sampler.sources[0].n < 6 and _time.monotonic() < deadline:
        _time.sleep(0.01)
    sampler.stop()
    assert sampler.missed_ticks >= 2
    assert any("sampling ticks were skipped: the sampler thread ran late" in n for n in sampler.facts().notes)
    assert sampler.samples()["x"][:4] == [1.0, 2.0, 3.0, 4.0]  # nothing lost, only later
