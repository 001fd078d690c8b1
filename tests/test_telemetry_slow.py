"""Slow series at 5 Hz beside a 20 Hz tick: NVML utilisation, memory, SM clock and
throttle reasons, and every psutil read, happen on one sample in four and are held in between;
the field-values call (instant power, PCIe byte counters) happens on every sample.

Uses the recorded H200 stand-in of tests/test_telemetry_nvml.py and the psutil stand-in of
tests/test_telemetry_host.py, each made to return a new value on every call, so a held value
can be traced to the read that produced it.
"""
from __future__ import annotations

import importlib.util
from pathlib import Path
from types import SimpleNamespace

import pytest

from gcdoctor.telemetry import TelemetrySampler
from gcdoctor.telemetry.host import HostSource
from gcdoctor.telemetry.nvml import NvmlSource


def _load(name):
    spec = importlib.util.spec_from_file_location(name, Path(__file__).with_name(f"{name}.py"))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


_nv, _host = _load("test_telemetry_nvml"), _load("test_telemetry_host")
SLOW_NVML = ["nvmlDeviceGetUtilizationRates", "nvmlDeviceGetMemoryInfo", "nvmlDeviceGetClockInfo",
             "nvmlDeviceGetCurrentClocksEventReasons"]


@pytest.fixture(autouse=True)
def _no_visible_devices(monkeypatch):
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)


class CountingNvml(_nv.FakeNvml):
    """Utilisation reads 1, 2, 3, ... % on successive calls."""

    def __init__(self, **kw):
        super().__init__(**kw)
        self.util_calls = 0

    def nvmlDeviceGetUtilizationRates(self, h):
        self._call("nvmlDeviceGetUtilizationRates")
        self.util_calls += 1
        return SimpleNamespace(gpu=self.util_calls, memory=0)


class CountingPsutil(_host.FakePsutil):
    """RSS grows by 1 byte on every memory_info() call; counts the cpu_times() calls."""

    def __init__(self, n):
        cores = [[_host.cpu(10.0 * i, 10.0 * i)] for i in range(n)]  # 50% busy between any two
        super().__init__(cores, [(0.1 * i, 0.0) for i in range(n)], rss=1000)
        self.cpu_reads = 0

    def cpu_times(self, percpu=False):
        self.cpu_reads += 1
        return super().cpu_times(percpu)

    def Process(self, pid):  # noqa: N802
        p = super().Process(pid)
        fake = self

        def memory_info():
            fake._rss += 1
            return SimpleNamespace(rss=fake._rss)

        p.memory_info = memory_info
        return p


class Clock:
    def __init__(self):
        self.t = 100.0

    def __call__(self):
        return self.t


def test_slow_series_every_4th_tick_memory_every_20th_at_20_hz_held_in_between():
    ticks = 21
    polls = [(1_000_000 + 50_000 * n, 0, 1_000_000 * n) for n in range(ticks + 2)]  # open, reset, ticks
    nvml = CountingNvml(pcie_counters=polls)
    clock = Clock()
    nv = NvmlSource(0, nvml=nvml, start_pollers=False, clock=clock)
    ps = CountingPsutil(ticks + 3)  # open, reset, then the slow ticks
    host = HostSource(psutil_module=ps, pid=12345, clock=clock)
    sampler = TelemetrySampler([nv, host], rate_hz=20, clock=clock)
    for src in (nv, host):
        src.set_rate_hz(20)
        src.reset()
    nvml.calls.clear()
    nvml.field_calls.clear()
    cpu_reads_before, util_before = ps.cpu_reads, nvml.util_calls
    util, rss, cpu_pct, slow_calls = [], [], [], []
    for _ in range(ticks):
        clock.t += 0.05
        _, v = sampler.sample_once()
        util.append(v["gpu0.util_pct"])
        rss.append(v["proc_rss_bytes"])
        cpu_pct.append(v["cpu_pct"])
        slow_calls.append(len(nvml.calls))
    assert nvml.field_calls == [[186, 197, 198]] * ticks  # power and PCIe: every tick
    # four slow NVML calls on tick 0 and 20 (memory included), three on ticks 4, 8, 12, 16
    assert slow_calls == [4] * 4 + [7] * 4 + [10] * 4 + [13] * 4 + [16] * 4 + [20]
    assert nvml.calls[:4] == SLOW_NVML
    assert nvml.calls[4:7] == [c for c in SLOW_NVML if c != "nvmlDeviceGetMemoryInfo"]
    assert ps.cpu_reads - cpu_reads_before == 6  # CPU times on ticks 0, 4, 8, 12, 16, 20
    u0 = util_before + 1
    assert util == [u0 + k for k in range(5) for _ in range(4)] + [u0 + 5]  # held: the last slow read
    assert rss == [1001.0] * 20 + [1002.0]  # memory_info on ticks 0 and 20
    assert cpu_pct == [50.0] * ticks
    assert v["gpu0.pcie_rx_gbs"] == pytest.approx(0.02)  # 1 MB in 50 ms, fresh on every tick
    notes = sampler.facts().notes
    assert any(n.startswith("slow series read at 5 Hz (one sample in 4 at 20 Hz)") and "gpu0.util_pct" in n
               and "gpu0.mem_used_bytes" not in n for n in notes)
    assert any(n.startswith("slow series read at 5 Hz") and "cpu_pct" in n and "proc_rss_bytes" not in n
               for n in notes)
    assert any(n.startswith("slow series read at 1 Hz (one sample in 20 at 20 Hz)") and "gpu0.mem_used_bytes" in n
               for n in notes)
    assert any(n.startswith("slow series read at 1 Hz") and "proc_rss_bytes" in n for n in notes)
    assert nv.static()["gpu0.slow_series_hz"] == 5.0 and host.static()["host.slow_series_hz"] == 5.0
    assert nv.static()["gpu0.memory_series_hz"] == 1.0 and host.static()["host.memory_series_hz"] == 1.0


def test_slow_hz_none_reads_everything_every_tick():
    nvml = CountingNvml(pcie_counters=[(1_000_000 + 50_000 * n, 0, 0) for n in range(6)])
    nv = NvmlSource(0, nvml=nvml, start_pollers=False, slow_hz=None)
    nv.set_rate_hz(20)
    nv.reset()
    nvml.util_calls = 0
    assert [nv.read()["gpu0.util_pct"] for _ in range(3)] == [1.0, 2.0, 3.0]
    assert not any(n.startswith("slow series") for n in nv.notes)


def test_a_failed_slow_read_is_missing_until_the_next_slow_read_not_the_stale_value():
    class Flaky(CountingNvml):
        def nvmlDeviceGetUtilizationRates(self, h):
            if self.util_calls == 1:  # the second slow read fails
                self.util_calls += 1
                raise _nv.NVMLError(999)
            return super().nvmlDeviceGetUtilizationRates(h)

    nvml = Flaky(pcie_counters=[(1_000_000 + 50_000 * n, 0, 0) for n in range(12)])
    nv = NvmlSource(0, nvml=nvml, start_pollers=False)
    nvml.util_calls = 0
    nv.set_rate_hz(10)  # slow every 2nd tick
    nv.reset()
    assert [nv.read().get("gpu0.util_pct") for _ in range(6)] == [1.0, 1.0, None, None, 3.0, 3.0]


def test_host_keeps_reading_every_tick_until_cpu_shares_exist():
    # a tick right after reset() has no interval for CPU shares: it must not be held for 4 ticks
    clock = Clock()
    ps = CountingPsutil(8)
    host = HostSource(psutil_module=ps, pid=12345, clock=clock)
    host.set_rate_hz(20)
    host.reset()
    first = host.read()  # 0 s after reset: no shares yet, missing rather than 0
    assert "cpu_pct" not in first and "proc_cpu_pct" not in first
    clock.t += 0.05
    second = host.read()  # tick 1 is not a slow tick, but nothing usable is held: read again
    assert second["cpu_pct"] == 50.0 and "proc_cpu_pct" in second
    reads = ps.cpu_reads
    for _ in range(2):
        clock.t += 0.05
        assert host.read()["cpu_pct"] == 50.0  # now held until the next slow tick (4)
    assert ps.cpu_reads == reads
    clock.t += 0.05
    host.read()
    assert ps.cpu_reads == reads + 1
