"""NVML source through a recorded fake of pynvml: values, PCIe counter unwrapping, fallbacks.

The fake returns responses recorded in the shapes nvidia-ml-py returns them (field values with
nvmlReturn/valueType/timestamp, structs with .gpu/.memory, .used/.total), with an H200's
static answers (Gen5 x16, 141 GiB class). Errors are raised as pynvml raises them: a subclass
of NVMLError per code whose str() is the NVML message.
"""
from __future__ import annotations

import sys
from types import SimpleNamespace

import pytest

from gcdoctor.telemetry import SourceUnavailable, TelemetrySampler, UnavailableSource, open_sources
from gcdoctor.telemetry.nvml import NvmlSource

NOT_SUPPORTED = 3  # NVML_ERROR_NOT_SUPPORTED


class NVMLError(Exception):
    messages = {3: "Not Supported", 12: "NVML Shared Library Not Found", 9: "Driver Not Loaded"}

    def __init__(self, value):
        super().__init__(value)
        self.value = value

    def __str__(self):
        return self.messages.get(self.value, f"NVML Error with code {self.value}")


class NVMLError_NotSupported(NVMLError):  # noqa: N801 - pynvml's naming
    def __init__(self):
        super().__init__(NOT_SUPPORTED)


def fv(field_id, value, ts_us=0, ret=0, value_type=1):
    """One c_nvmlFieldValue_t as pynvml returns it (value in the union member of value_type)."""
    member = {0: "dVal", 1: "uiVal", 3: "ullVal"}[value_type]
    return SimpleNamespace(fieldId=field_id, timestamp=ts_us, nvmlReturn=ret, valueType=value_type,
                           value=SimpleNamespace(**{member: value}))


# Responses recorded per call for one H200 (values as pynvml hands them back).
H200 = {
    "name": "NVIDIA H200", "uuid": "GPU-5a1c0f7e-0000-4000-8000-000000000001",
    "utilization": SimpleNamespace(gpu=87, memory=41),
    "memory": SimpleNamespace(total=150_754_820_096, used=81_604_378_624, free=69_150_441_472),
    "sm_clock": 1980, "power_usage_mw": 402_113, "power_instant_mw": 512_250,
    "reasons": 0x1,  # GPU idle bit
    "link": {"curr_gen": 5, "max_gen": 5, "curr_width": 16, "max_width": 16},
    "processes": [SimpleNamespace(pid=4242, usedGpuMemory=80_000_000_000, gpuInstanceId=0, computeInstanceId=0)],
}


class FakeNvml:
    """Stand-in for the pynvml module, replaying recorded responses."""

    NVMLError = NVMLError
    NVMLError_NotSupported = NVMLError_NotSupported

    def __init__(self, devices=None, unsupported=(), pcie_counters=None, throughput_kbs=None, init_error=None):
        self.devices = devices if devices is not None else [H200]
        self.unsupported = set(unsupported)  # names of calls that raise Not Supported
        self.pcie_counters = list(pcie_counters or [])  # [(ts_us, tx_raw, rx_raw)] consumed per poll
        self.throughput_kbs = throughput_kbs or {0: 1_200, 1: 59_500_000}
        self.init_error = init_error
        self.calls: list[str] = []
        self.field_calls: list[list[int]] = []  # the ids of every nvmlDeviceGetFieldValues call
        self.shutdowns = 0

    def _call(self, name):
        self.calls.append(name)
        if name in self.unsupported:
            raise NVMLError_NotSupported()

    def nvmlInit(self):
        if self.init_error is not None:
            raise NVMLError(self.init_error)

    def nvmlShutdown(self):
        self.shutdowns += 1

    def nvmlSystemGetDriverVersion(self):
        return "580.159"

    def nvmlDeviceGetCount(self):
        return len(self.devices)

    def nvmlDeviceGetHandleByIndex(self, i):
        return ("handle", i)

    def nvmlDeviceGetHandleByUUID(self, uuid):
        for i, d in enumerate(self.devices):
            if d["uuid"] == uuid:
                return ("handle", i)
        raise NVMLError(13)

    def _dev(self, h):
        return self.devices[h[1]]

    def nvmlDeviceGetName(self, h):
        return self._dev(h)["name"]

    def nvmlDeviceGetUUID(self, h):
        return self._dev(h)["uuid"]

    def nvmlDeviceGetUtilizationRates(self, h):
        self._call("nvmlDeviceGetUtilizationRates")
        return self._dev(h)["utilization"]

    def nvmlDeviceGetMemoryInfo(self, h):
        self._call("nvmlDeviceGetMemoryInfo")
        return self._dev(h)["memory"]

    def nvmlDeviceGetClockInfo(self, h, clock):
        self._call("nvmlDeviceGetClockInfo")
        assert clock == 1  # NVML_CLOCK_SM
        return self._dev(h)["sm_clock"]

    def nvmlDeviceGetPowerUsage(self, h):
        self._call("nvmlDeviceGetPowerUsage")
        return self._dev(h)["power_usage_mw"]

    def nvmlDeviceGetCurrentClocksEventReasons(self, h):
        self._call("nvmlDeviceGetCurrentClocksEventReasons")
        return self._dev(h)["reasons"]

    def nvmlDeviceGetCurrPcieLinkGeneration(self, h):
        return self._dev(h)["link"]["curr_gen"]

    def nvmlDeviceGetMaxPcieLinkGeneration(self, h):
        return self._dev(h)["link"]["max_gen"]

    def nvmlDeviceGetCurrPcieLinkWidth(self, h):
        return self._dev(h)["link"]["curr_width"]

    def nvmlDeviceGetMaxPcieLinkWidth(self, h):
        return self._dev(h)["link"]["max_width"]

    def nvmlDeviceGetFieldValues(self, h, ids):
        """Power (186) and the PCIe counters (197, 198; one recorded poll per call), in any mix."""
        self.field_calls.append(list(ids))
        assert set(ids) <= {186, 197, 198}
        counters = self.pcie_counters.pop(0) if {197, 198} & set(ids) and "pcie_counters" not in self.unsupported \
            else None
        out = []
        for i in ids:
            if i == 186:
                out.append(fv(186, 0, ret=NOT_SUPPORTED) if "power_instant" in self.unsupported
                           else fv(186, self._dev(h)["power_instant_mw"]))
            elif counters is None:
                out.append(fv(i, 0, ret=NOT_SUPPORTED))
            else:
                ts, tx, rx = counters
                out.append(fv(i, tx if i == 197 else rx, ts))
        return out

    def nvmlDeviceGetPcieThroughput(self, h, counter):
        self._call("nvmlDeviceGetPcieThroughput")
        return self.throughput_kbs[counter]

    def nvmlDeviceGetComputeRunningProcesses(self, h):
        return self._dev(h)["processes"]


def open_fake(nvml, **kw):
    return NvmlSource(0, nvml=nvml, start_pollers=False, **kw)


@pytest.fixture(autouse=True)
def _no_visible_devices(monkeypatch):
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)


def test_reads_every_series_of_an_h200_with_its_units():
    nvml = FakeNvml(pcie_counters=[(1_000_000, 0, 0), (1_020_000, 0, 0)])
    src = open_fake(nvml)
    values = src.read()
    assert values["gpu0.util_pct"] == 87.0
    assert values["gpu0.mem_util_pct"] == 41.0
    assert values["gpu0.mem_used_bytes"] == 81_604_378_624.0
    assert values["gpu0.mem_total_bytes"] == 150_754_820_096.0
    assert values["gpu0.power_w"] == 512.25  # the instant field, not the 1 s average (402.113)
    assert values["gpu0.sm_clock_mhz"] == 1980.0
    assert values["gpu0.throttle_reasons"] == 1.0
    assert src.unavailable == {}
    st = src.static()
    assert st["gpu0.name"] == "NVIDIA H200" and st["gpu0.index"] == 0
    assert (st["gpu0.pcie_link_gen_max"], st["gpu0.pcie_link_width_max"]) == (5, 16)
    assert st["gpu0.pcie_link_peak_gbs"] == 63.008  # 3.938 GB/s per lane x 16
    assert st["gpu0.total_memory_bytes"] == 150_754_820_096
    assert st["gpu0.power_counter"].startswith("NVML_FI_DEV_POWER_INSTANT")
    assert src.processes() == [{"device": "gpu0", "pid": 4242, "used_memory_bytes": 80_000_000_000}]


def test_pcie_counters_are_unwrapped_across_the_32_bit_boundary():
    wrap = 2 ** 32
    start_tx, start_rx = wrap - 300_000_000, wrap - 1_000_000_000
    polls = [
        (1_000_000, start_tx, start_rx),  # open: primes the counters
        (1_020_000, (start_tx + 20_000_000) % wrap, (start_rx + 1_000_000_000) % wrap),  # 20 ms
        (1_040_000, (start_tx + 40_000_000) % wrap, (start_rx + 2_000_000_000) % wrap),  # wraps RX
        (1_060_000, (start_tx + 360_000_000) % wrap, (start_rx + 2_500_000_000) % wrap),  # wraps TX
    ]
    src = open_fake(FakeNvml(pcie_counters=polls), pcie_poll_hz=50)  # a poller, driven by hand
    src.reset()  # what the sampler does on start: rates begin at the primed poll
    src.poll_pcie()
    src.poll_pcie()
    first = src.read()
    assert first["gpu0.pcie_tx_gbs"] == pytest.approx(1.0)  # 40 MB in 40 ms
    assert first["gpu0.pcie_rx_gbs"] == pytest.approx(50.0)  # 2 GB in 40 ms, through a wrap
    src.poll_pcie()
    second = src.read()
    assert second["gpu0.pcie_tx_gbs"] == pytest.approx(16.0)  # 320 MB in 20 ms, through a wrap
    assert second["gpu0.pcie_rx_gbs"] == pytest.approx(25.0)


def test_an_interval_too_long_to_unwrap_makes_the_rate_unavailable_not_wrong():
    # Gen5 x16 moves up to 63 GB/s: in 100 ms it could wrap a 4 GiB counter more than once
    polls = [(0 + 1_000_000, 0, 0), (1_020_000, 1000, 1000), (1_120_000, 5000, 5000), (1_140_000, 7000, 9000)]
    src = open_fake(FakeNvml(pcie_counters=polls), pcie_poll_hz=50)  # a poller, driven by hand
    src.reset()
    src.poll_pcie()
    assert src.read()["gpu0.pcie_rx_gbs"] == pytest.approx(1000 / 0.02 / 1e9)
    src.poll_pcie()  # the 100 ms gap
    assert src.read()["gpu0.pcie_rx_gbs"] is None
    src.poll_pcie()
    assert src.read()["gpu0.pcie_rx_gbs"] == pytest.approx(4000 / 0.02 / 1e9)
    assert src.static()["gpu0.pcie_counter_ambiguous_intervals"] == 2  # TX and RX


def test_no_new_counter_value_is_missing_not_zero():
    polls = [(1_000_000, 10, 10), (1_000_000, 10, 10)]  # the driver has not refreshed the fields
    src = open_fake(FakeNvml(pcie_counters=polls), pcie_poll_hz=50)  # a poller, driven by hand
    src.reset()
    src.poll_pcie()
    assert src.read()["gpu0.pcie_tx_gbs"] is None


def test_unsupported_calls_are_unavailable_with_nvml_reason():
    nvml = FakeNvml(unsupported={"nvmlDeviceGetClockInfo", "nvmlDeviceGetCurrentClocksEventReasons", "power_instant"},
                    pcie_counters=[(1, 0, 0)])
    src = open_fake(nvml)
    assert src.unavailable == {
        "gpu0.sm_clock_mhz": "NVML nvmlDeviceGetClockInfo(SM): Not Supported",
        "gpu0.throttle_reasons": "NVML nvmlDeviceGetCurrentClocksEventReasons: Not Supported",
    }
    assert "gpu0.sm_clock_mhz" not in src.series and "gpu0.power_w" in src.series
    n_calls = nvml.calls.count("nvmlDeviceGetClockInfo")
    values = src.read()
    assert "gpu0.sm_clock_mhz" not in values
    assert nvml.calls.count("nvmlDeviceGetClockInfo") == n_calls  # never asked again
    assert values["gpu0.power_w"] == 402.113  # fell back to the averaged power
    assert any("1 s average" in n for n in src.notes)


def test_without_byte_counters_pcie_falls_back_to_the_throughput_call():
    src = open_fake(FakeNvml(unsupported={"pcie_counters"}))
    src.poll_pcie()  # one TX and one RX window
    values = src.read()
    assert values["gpu0.pcie_rx_gbs"] == 59.5  # 59,500,000 KB/s, KB = 1000 bytes
    assert values["gpu0.pcie_tx_gbs"] == 0.0012
    assert src.read()["gpu0.pcie_rx_gbs"] is None  # no window completed since the last read
    assert src.static()["gpu0.pcie_counter"].startswith("nvmlDeviceGetPcieThroughput")


def test_throughput_mode_skips_the_byte_counters():
    nvml = FakeNvml(pcie_counters=[])  # any field poll for 197/198 would fail: the list is empty
    src = open_fake(nvml, pcie_mode="throughput")
    src.poll_pcie()
    assert src.read()["gpu0.pcie_rx_gbs"] == 59.5


def test_pcie_unavailable_when_neither_counter_exists():
    src = open_fake(FakeNvml(unsupported={"pcie_counters", "nvmlDeviceGetPcieThroughput"}))
    reason = src.unavailable["gpu0.pcie_rx_gbs"]
    assert "197/198 not supported" in reason and "nvmlDeviceGetPcieThroughput: Not Supported" in reason
    assert "gpu0.pcie_rx_gbs" not in src.series and "gpu0.pcie_rx_gbs" not in src.read()


def test_visible_devices_renumber_the_series(monkeypatch):
    second = dict(H200, uuid="GPU-second", name="NVIDIA H200 #3")
    nvml = FakeNvml(devices=[H200, H200, H200, second], pcie_counters=[(1, 0, 0)] * 4)
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "2,GPU-second")
    src = NvmlSource(1, nvml=nvml, start_pollers=False)
    assert src.static()["gpu1.name"] == "NVIDIA H200 #3"
    assert src.static()["gpu1.index"] is None  # selected by UUID
    assert all(s.startswith("gpu1.") for s in src.series)


def test_all_devices_for_monitor():
    nvml = FakeNvml(devices=[H200, dict(H200, uuid="GPU-b")], pcie_counters=[(1, 0, 0)] * 2)
    src = NvmlSource(None, nvml=nvml, start_pollers=False)
    assert {s.split(".")[0] for s in src.series} == {"gpu0", "gpu1"}
    assert [p["device"] for p in src.processes()] == ["gpu0", "gpu1"]


def test_nvml_that_cannot_initialise_says_why():
    nvml = FakeNvml(init_error=9)
    with pytest.raises(SourceUnavailable, match="NVML: Driver Not Loaded"):
        NvmlSource(0, nvml=nvml)


def test_close_stops_and_shuts_nvml_down_once():
    nvml = FakeNvml(pcie_counters=[(1, 0, 0)])
    src = open_fake(nvml)
    src.close()
    src.close()
    assert nvml.shutdowns == 1


def test_missing_binding_makes_every_gpu_series_unavailable(monkeypatch):
    monkeypatch.setitem(sys.modules, "pynvml", None)  # import pynvml -> ImportError
    sources = open_sources("cuda", 0, include_host=False)
    (src,) = sources
    assert isinstance(src, UnavailableSource)
    facts = TelemetrySampler(sources).facts()
    assert facts.series == []
    assert facts.unavailable["gpu0.pcie_tx_gbs"] == "nvidia-ml-py not installed (pip install nvidia-ml-py)"
    assert len([k for k in facts.unavailable if k.startswith("gpu0.")]) == 9


class StreamingNvml(FakeNvml):
    """Counters that advance 1 GB RX and 0.25 GB TX per 20 ms of NVML time on every poll."""

    def __init__(self):
        super().__init__()
        self.n = 0

    def nvmlDeviceGetFieldValues(self, h, ids):
        if ids != [197, 198]:
            return super().nvmlDeviceGetFieldValues(h, ids)
        self.n += 1
        ts = 1_000_000 + 20_000 * self.n
        return [fv(197, (250_000_000 * self.n) % 2**32, ts), fv(198, (1_000_000_000 * self.n) % 2**32, ts)]


def test_threaded_poller_feeds_the_sampler_and_stops_with_it():
    import threading

    got = threading.Event()
    seen = []

    def on_sample(t, values):
        if values["gpu0.pcie_rx_gbs"] is not None:
            seen.append((values["gpu0.pcie_rx_gbs"], values["gpu0.pcie_tx_gbs"]))
            got.set()

    src = NvmlSource(0, nvml=StreamingNvml(), pcie_poll_hz=200)
    poller = src._counters._thread
    with TelemetrySampler([src], rate_hz=100, on_sample=on_sample) as sampler:
        sampler_thread = sampler._thread
        assert got.wait(10.0)
    assert seen[0] == (pytest.approx(50.0), pytest.approx(12.5))
    assert not poller.is_alive() and not sampler_thread.is_alive()
