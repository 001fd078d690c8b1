"""Moore Threads sources against recorded outputs: the published mthreads-gmi tables in
samples/musa/ and a fake of pymtml (mthreads-ml-py) answering as its source code does.
No MUSA hardware was used."""
from __future__ import annotations

import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

from gcdoctor.telemetry import SourceUnavailable, TelemetrySampler, UnavailableSource, open_sources
from gcdoctor.telemetry.mthreads import MthreadsGmiSource, PymtmlSource, parse_gmi_table

SAMPLES = Path(__file__).resolve().parent.parent / "samples" / "musa"
S5000 = (SAMPLES / "mthreads-gmi-2.3.2-mtt-s5000.txt").read_text()
S80 = (SAMPLES / "mthreads-gmi-1.8.2-mtt-s80.txt").read_text()
MIB = 2 ** 20


@pytest.fixture(autouse=True)
def _no_visible_devices(monkeypatch):
    monkeypatch.delenv("MUSA_VISIBLE_DEVICES", raising=False)


def test_parses_the_s5000_table():
    t = parse_gmi_table(S5000)
    assert (t.version, t.driver) == ("2.3.2", "3.3.5-server")
    assert [(d.index, d.name, d.bus_id) for d in t.devices] == [
        (0, "MTT S5000", "00000000:2a:00.0"), (1, "MTT S5000", "00000000:3a:00.0")]
    d0, d1 = t.devices
    assert (d0.util_pct, d0.mem_used_bytes, d0.mem_total_bytes) == (0.0, 66641 * MIB, 81920 * MIB)
    assert (d1.mem_used_bytes, d1.temp_c) == (64889 * MIB, 51.0)
    assert (d0.device_type, d0.perf_state, d0.link_width_current, d0.link_width_max) == ("Physical", "P0", 16, 16)
    assert (d0.temp_c, d0.mpc_capable, d0.ecc_mode) == (52.0, "YES", "On-die, EDC")
    assert t.processes == []


def test_parses_the_s80_table_and_its_cut_off_process_row():
    t = parse_gmi_table(S80)
    assert (t.version, t.driver) == ("1.8.2", "2.5.0")
    (d,) = t.devices
    assert (d.index, d.name, d.bus_id, d.util_pct) == (0, "MTT S80", "00000000:01:00.0", 0.0)
    assert (d.mem_used_bytes, d.mem_total_bytes) == (92 * MIB, 16384 * MIB)
    assert (d.device_type, d.perf_state, d.link_width_current, d.link_width_max, d.temp_c) == (
        "Physical", None, 16, 16, 54.0)
    (p,) = t.processes
    assert (p.device_index, p.pid, p.name, p.used_memory_bytes) == (0, 1107, "/usr/b", None)


def test_a_narrowed_link_and_busy_device_are_read_as_printed():
    text = S80.replace("16x(16x)", "4x(16x)").replace("|0%    92MiB", "|87%   92MiB")
    (d,) = parse_gmi_table(text).devices
    assert (d.link_width_current, d.link_width_max, d.util_pct) == (4, 16, 87.0)


def test_gmi_source_series_values_and_reasons():
    src = MthreadsGmiSource(0, run=lambda: S5000, start_poller=False)
    assert src.series == ["gpu0.util_pct", "gpu0.mem_used_bytes", "gpu0.mem_total_bytes"]
    assert src.read() == {"gpu0.util_pct": 0.0, "gpu0.mem_used_bytes": float(66641 * MIB),
                          "gpu0.mem_total_bytes": float(81920 * MIB)}
    assert src.unavailable["gpu0.pcie_rx_gbs"] == "the mthreads-gmi table has no PCIe throughput"
    assert src.unavailable["gpu0.power_w"] == "the mthreads-gmi table has no power column"
    st = src.static()
    assert (st["gpu0.name"], st["gpu0.pcie_link_width_current"], st["gpu0.pcie_link_width_max"]) == (
        "MTT S5000", 16, 16)
    assert st["gpu0.pcie_link_peak_gbs"] is None  # the table gives no link generation
    assert st["mthreads-gmi.version"] == "2.3.2"


def test_gmi_source_follows_musa_visible_devices(monkeypatch):
    monkeypatch.setenv("MUSA_VISIBLE_DEVICES", "1")
    src = MthreadsGmiSource(0, run=lambda: S5000, start_poller=False)
    assert src.read()["gpu0.mem_used_bytes"] == float(64889 * MIB)
    assert src.static()["gpu0.index"] == 1


def test_gmi_source_reads_the_latest_poll_and_treats_a_stale_one_as_missing():
    outputs = [S80, S80.replace("92MiB(16384MiB)", "15000MiB(16384MiB)")]
    clock = SimpleNamespace(t=0.0)
    src = MthreadsGmiSource(0, run=lambda: outputs.pop(0), start_poller=False, clock=lambda: clock.t)
    clock.t = 1.0
    src.poll_once()
    assert src.read()["gpu0.mem_used_bytes"] == float(15000 * MIB)
    clock.t = 4.5  # more than three 1 s intervals since the last parse
    assert src.read() == {}
    assert src.processes() == [{"device": "gpu0", "pid": 1107, "name": "/usr/b", "used_memory_bytes": None}]


def test_gmi_not_on_path(monkeypatch):
    monkeypatch.setattr("shutil.which", lambda name: None)
    with pytest.raises(SourceUnavailable, match="mthreads-gmi not on PATH"):
        MthreadsGmiSource(0)


class MTMLError(Exception):
    pass


class FakePymtml:
    """Answers as pymtml does: native mtml* calls raise MTMLError; its NVML shim returns 0
    for what it does not support (nvmlDeviceGetPcieThroughput, the SM clock, ...)."""

    MTMLError = MTMLError

    def __init__(self, power_mw=0, gpu_clock=0, mem_util_error=True):
        self.power_mw, self.gpu_clock, self.mem_util_error = power_mw, gpu_clock, mem_util_error
        self.calls = []
        self.shut = False

    def nvmlInit(self):
        pass

    def nvmlShutdown(self):
        self.shut = True

    def nvmlDeviceGetCount(self):
        return 1

    def nvmlDeviceGetHandleByIndex(self, i):
        return ("dev", i)

    def nvmlDeviceGetName(self, h):
        return "MTT S4000"

    def nvmlDeviceGetUUID(self, h):
        return "7de4d75b-7522-1fdc-8dc4-db9a169a5e88"

    def mtmlGpuGetUtilization(self, h):
        return 37

    def mtmlMemoryGetUtilization(self, h):
        if self.mem_util_error:
            raise MTMLError("Not Supported")
        return 12

    def nvmlDeviceGetMemoryInfo(self, h):
        return SimpleNamespace(total=48 * 2**30, used=20 * 2**30, free=28 * 2**30)

    def mtmlDeviceGetPowerUsage(self, h):
        return self.power_mw

    def mtmlGpuGetClock(self, h):
        return self.gpu_clock

    def mtmlDeviceGetPciInfo(self, h):
        return SimpleNamespace(pciCurGen=5, pciMaxGen=5, pciCurWidth=16, pciMaxWidth=16)

    def nvmlDeviceGetPcieThroughput(self, h, counter):
        self.calls.append("nvmlDeviceGetPcieThroughput")
        return 0


def test_pymtml_zero_means_unsupported_never_a_measurement():
    m = FakePymtml(power_mw=0, gpu_clock=0)
    src = PymtmlSource(0, mtml=m)
    assert src.series == ["gpu0.util_pct", "gpu0.mem_used_bytes", "gpu0.mem_total_bytes"]
    zero = "pymtml returned 0, which it returns for unsupported calls: not a measurement"
    assert src.unavailable["gpu0.power_w"] == zero
    assert src.unavailable["gpu0.sm_clock_mhz"] == zero
    assert src.unavailable["gpu0.mem_util_pct"] == "pymtml: MTMLError: Not Supported"
    assert src.unavailable["gpu0.pcie_tx_gbs"].startswith("pymtml has no PCIe throughput counter")
    assert src.read() == {"gpu0.util_pct": 37.0, "gpu0.mem_used_bytes": float(20 * 2**30),
                          "gpu0.mem_total_bytes": float(48 * 2**30)}
    assert m.calls == []  # the shim's PCIe "throughput" (always 0) is never asked
    src.close()
    assert m.shut


def test_pymtml_real_values_and_link():
    src = PymtmlSource(0, mtml=FakePymtml(power_mw=245_500, gpu_clock=1750, mem_util_error=False))
    values = src.read()
    assert (values["gpu0.power_w"], values["gpu0.sm_clock_mhz"], values["gpu0.mem_util_pct"]) == (245.5, 1750.0, 12.0)
    st = src.static()
    assert (st["gpu0.name"], st["gpu0.pcie_link_gen_max"], st["gpu0.pcie_link_peak_gbs"]) == ("MTT S4000", 5, 63.008)
    assert st["gpu0.total_memory_bytes"] == 48 * 2**30


def test_pymtml_reading_zero_later_is_missing_not_zero():
    m = FakePymtml(power_mw=245_500, gpu_clock=1750)
    src = PymtmlSource(0, mtml=m)
    m.power_mw = 0
    assert src.read()["gpu0.power_w"] is None


def test_no_musa_source_at_all_lists_every_reason(monkeypatch):
    monkeypatch.setitem(sys.modules, "pymtml", None)
    monkeypatch.setattr("shutil.which", lambda name: None)
    sources = open_sources("musa", 0, include_host=False)
    (src,) = sources
    assert isinstance(src, UnavailableSource)
    facts = TelemetrySampler(sources).facts()
    assert facts.unavailable["gpu0.util_pct"] == (
        "pymtml: mthreads-ml-py not installed (import pymtml failed); mthreads-gmi: mthreads-gmi not on PATH")
    assert facts.series == [] and facts.sources == []
