"""The sampler: window alignment with step boundaries, buffering, CSV, facts, failure paths."""
from __future__ import annotations

import csv
import threading

import pytest

from gcdoctor.facts import Facts
from gcdoctor.facts.telemetry import SeriesSummary
from gcdoctor.telemetry import Source, TelemetrySampler, UnavailableSource


class FakeClock:
    def __init__(self, t: float = 100.0) -> None:
        self.t = t

    def __call__(self) -> float:
        return self.t


class ScriptedSource(Source):
    """Returns the next scripted dict on each read."""

    name = "scripted"

    def __init__(self, series, script, static=None, unavailable=None):
        super().__init__()
        self.series = list(series)
        self._script = list(script)
        self._static = static or {}
        self.unavailable = dict(unavailable or {})
        self.closed = False
        self.resets = 0

    def read(self):
        return self._script.pop(0)

    def reset(self):
        self.resets += 1

    def static(self):
        return dict(self._static)

    def close(self):
        self.closed = True


def run_samples(times, values, **kw):
    clock = FakeClock()
    src = ScriptedSource(["gpu0.util_pct", "cpu_pct"], values)
    sampler = TelemetrySampler([src], rate_hz=20, clock=clock, wall_clock=lambda: 1.7e9 + clock.t, **kw)
    for t in times:
        clock.t = t
        sampler.sample_once()
    return sampler


def test_window_takes_samples_after_start_up_to_and_including_end():
    # steps: (0.0, 0.2], (0.2, 0.4]; the sample at 0.2 closes the first step only
    times = [0.05, 0.10, 0.15, 0.20, 0.25, 0.30, 0.35, 0.40]
    vals = [{"gpu0.util_pct": float(i * 10), "cpu_pct": 50.0} for i in range(8)]
    s = run_samples(times, vals)
    step1 = s.summarize(0.0, 0.2)
    step2 = s.summarize(0.2, 0.4)
    assert step1["gpu0.util_pct"] == SeriesSummary(mean=15.0, min=0.0, max=30.0, n=4)
    assert step2["gpu0.util_pct"] == SeriesSummary(mean=55.0, min=40.0, max=70.0, n=4)
    assert step1["cpu_pct"] == SeriesSummary(mean=50.0, min=50.0, max=50.0, n=4)


def test_window_without_a_sample_is_empty_not_zero():
    s = run_samples([1.0, 2.0], [{"gpu0.util_pct": 5.0}, {"gpu0.util_pct": 7.0}])
    assert s.summarize(1.2, 1.8, covering=False)["gpu0.util_pct"] == SeriesSummary(mean=None, min=None, max=None, n=0)
    # nothing after the window yet: still empty, not zero
    assert s.summarize(2.2, 2.8)["gpu0.util_pct"] == SeriesSummary(mean=None, min=None, max=None, n=0)


def test_a_window_shorter_than_the_period_takes_the_sample_that_covers_it():
    # the sample at t=2.0 describes (1.0, 2.0], which holds the whole window (1.2, 1.8]
    s = run_samples([1.0, 2.0], [{"gpu0.util_pct": 5.0}, {"gpu0.util_pct": 7.0}])
    assert s.summarize(1.2, 1.8)["gpu0.util_pct"] == SeriesSummary(mean=7.0, min=7.0, max=7.0, n=1)


def test_bitmask_series_are_or_ed_over_a_window():
    s = run_samples([1.0, 2.0, 3.0, 4.0], [{"gpu0.util_pct": 0x4}, {"gpu0.util_pct": 0x1}, {"gpu0.util_pct": None},
                                           {"gpu0.util_pct": 0x40}])
    assert s.bitwise_or("gpu0.util_pct", 0.0, 3.0) == 0x5
    assert s.bitwise_or("gpu0.util_pct", 2.0, 3.0) is None
    assert s.bitwise_or("gpu9.util_pct", 0.0, 9.0) is None


def test_missing_values_are_left_out_of_the_statistics():
    vals = [{"gpu0.util_pct": 10.0, "cpu_pct": None}, {"gpu0.util_pct": None, "cpu_pct": 30.0},
            {"gpu0.util_pct": 20.0}]  # cpu_pct absent from the third read
    s = run_samples([1.0, 2.0, 3.0], vals)
    out = s.summarize(0.0, 3.0)
    assert out["gpu0.util_pct"] == SeriesSummary(mean=15.0, min=10.0, max=20.0, n=2)
    assert out["cpu_pct"] == SeriesSummary(mean=30.0, min=30.0, max=30.0, n=1)
    assert s.samples()["cpu_pct"] == [None, 30.0, None]


def test_ring_buffer_keeps_the_newest_samples():
    # 1 s at 20 Hz = 20 samples of capacity; trimming happens in chunks of capacity/8
    n = 40
    s = run_samples([i * 0.05 for i in range(n)], [{"gpu0.util_pct": float(i)} for i in range(n)],
                    buffer_seconds=1.0)
    kept = s.samples()["gpu0.util_pct"]
    assert len(kept) <= 20 + 20 // 8
    assert kept[-1] == 39.0 and kept == [float(i) for i in range(n - len(kept), n)]
    assert s.samples_taken == n


def test_write_csv_has_one_row_per_sample_and_empty_cells_for_missing(tmp_path):
    s = run_samples([1.5, 2.5], [{"gpu0.util_pct": 12.5, "cpu_pct": None}, {"gpu0.util_pct": 0.0, "cpu_pct": 3.0}])
    path = s.write_csv(tmp_path / "telemetry.csv")
    rows = list(csv.reader(open(path)))
    assert rows[0] == ["t_monotonic_s", "wall_time_s", "gpu0.util_pct", "cpu_pct"]
    assert rows[1] == ["1.500000", "1700000001.500000", "12.5", ""]
    assert rows[2] == ["2.500000", "1700000002.500000", "0.0", "3.0"]


def test_on_sample_gets_every_sample_and_a_failing_callback_is_detached():
    seen = []

    def callback(t, values):
        seen.append((t, dict(values)))
        if len(seen) == 2:
            raise RuntimeError("front end broke")

    s = run_samples([1.0, 2.0, 3.0], [{"gpu0.util_pct": float(i)} for i in range(3)], on_sample=callback)
    assert seen == [(1.0, {"gpu0.util_pct": 0.0, "cpu_pct": None}), (2.0, {"gpu0.util_pct": 1.0, "cpu_pct": None})]
    assert s.samples_taken == 3
    assert "front end broke" in s.callback_error


def test_a_source_that_fails_to_read_gives_missing_samples_and_a_recorded_error():
    class Broken(ScriptedSource):
        name = "broken"

        def read(self):
            raise OSError("device gone")

    ok = ScriptedSource(["cpu_pct"], [{"cpu_pct": 1.0}])
    s = TelemetrySampler([Broken(["gpu0.util_pct"], []), ok], clock=FakeClock())
    _, values = s.sample_once()
    assert values == {"gpu0.util_pct": None, "cpu_pct": 1.0}
    assert s.facts().read_errors == {"broken": "OSError: device gone"}


def test_facts_list_unavailable_series_with_reasons_and_device_statics():
    gpu = ScriptedSource(["gpu0.util_pct"], [], static={
        "gpu0.name": "NVIDIA H200", "gpu0.source": "nvml", "gpu0.pcie_link_gen_max": 5,
        "gpu0.pcie_link_width_max": 16, "gpu0.pcie_link_peak_gbs": 63.008, "gpu0.total_memory_bytes": 150_000,
        "nvml.driver_version": "580.159"}, unavailable={"gpu0.power_w": "NVML nvmlDeviceGetPowerUsage: Not Supported"})
    missing = UnavailableSource("host", "psutil not installed", ["cpu_pct", "proc_rss_bytes"])
    s = TelemetrySampler([gpu, missing], rate_hz=10, clock=FakeClock())
    f = s.facts()
    assert f.source == "scripted" and f.sources == ["scripted"]
    assert f.series == ["gpu0.util_pct"]
    assert f.unavailable == {"gpu0.power_w": "NVML nvmlDeviceGetPowerUsage: Not Supported",
                             "cpu_pct": "psutil not installed", "proc_rss_bytes": "psutil not installed"}
    assert f.pcie_link_peak_gbs == 63.008
    (dev,) = f.devices
    assert (dev.key, dev.name, dev.pcie_link_gen_max, dev.total_memory_bytes) == ("gpu0", "NVIDIA H200", 5, 150_000)
    assert f.static["nvml.driver_version"] == "580.159"
    assert f.samples == 0 and f.duration_s is None


def test_facts_round_trip_through_facts_json(tmp_path):
    s = run_samples([1.0, 1.5, 2.0], [{"gpu0.util_pct": 1.0}] * 3)
    facts = Facts(telemetry=s.facts())
    facts.save(tmp_path / "facts.json")
    back = Facts.load(tmp_path / "facts.json").telemetry
    assert back == facts.telemetry
    assert back.duration_s == 1.0 and back.achieved_rate_hz == 2.0


def test_thread_samples_streams_to_csv_and_closes_sources(tmp_path):
    three = threading.Event()
    src = ScriptedSource(["cpu_pct"], [{"cpu_pct": float(i)} for i in range(10_000)])
    s = TelemetrySampler([src], rate_hz=200, stream_path=tmp_path / "stream.csv",
                         on_sample=lambda t, v: three.set() if v["cpu_pct"] >= 2 else None)
    with s:
        assert three.wait(10.0)
    assert src.resets == 1 and src.closed
    rows = list(csv.reader(open(tmp_path / "stream.csv")))
    assert rows[0] == ["t_monotonic_s", "wall_time_s", "cpu_pct"]
    assert [float(r[2]) for r in rows[1:]] == s.samples()["cpu_pct"]
    assert s.facts().path == str(tmp_path / "stream.csv")


def test_rate_must_be_positive():
    with pytest.raises(ValueError):
        TelemetrySampler([], rate_hz=0)
