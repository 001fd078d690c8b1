"""psutil host source: CPU shares from deltas of recorded CPU times, process CPU, memory."""
from __future__ import annotations

import subprocess
import sys
from collections import namedtuple
from types import SimpleNamespace

import pytest

from gcdoctor.telemetry.host import HostSource
from gcdoctor.telemetry.pcie import link_peak_gbs

# psutil's Linux scputimes field order
CPU = namedtuple("scputimes", "user nice system idle iowait irq softirq steal guest guest_nice")


def cpu(user, idle, iowait=0.0, guest=0.0):
    return CPU(user, 0.0, 0.0, idle, iowait, 0.0, 0.0, 0.0, guest, 0.0)


class FakePsutil:
    """Replays recorded cpu_times(percpu=True) snapshots, one per call."""

    def __init__(self, per_cpu_snapshots, proc_times, rss=123_456_789):
        self._cpu = list(per_cpu_snapshots)
        self._proc = list(proc_times)
        self._rss = rss

    def cpu_times(self, percpu=False):
        assert percpu
        return self._cpu.pop(0)

    def virtual_memory(self):
        return SimpleNamespace(total=64 * 2**30, available=48 * 2**30)

    def Process(self, pid):  # noqa: N802 - psutil's name
        fake = self

        class P:
            def cpu_times(self):
                user, system = fake._proc.pop(0)
                return SimpleNamespace(user=user, system=system)

            def memory_info(self):
                return SimpleNamespace(rss=fake._rss)

        return P()


class Clock:
    def __init__(self):
        self.t = 10.0

    def __call__(self):
        return self.t


def test_cpu_shares_come_from_deltas_of_cpu_times():
    snapshots = [
        [cpu(0, 0), cpu(0, 0)],  # probe at open
        [cpu(100, 100), cpu(50, 150)],  # reset: the baseline
        # 1 s later: core 0 busy 0.9 s, core 1 busy 0.2 s and 0.3 s in iowait
        [cpu(100.9, 100.1), cpu(50.2, 150.5, iowait=0.3)],
    ]
    clock = Clock()
    ps = FakePsutil(snapshots, proc_times=[(5.0, 1.0), (5.6, 1.1)])
    src = HostSource(psutil_module=ps, pid=1, clock=clock)
    clock.t += 1.0
    values = src.read()
    assert values["cpu_pct"] == pytest.approx(55.0, abs=1e-9)  # 1.1 busy of 2.0 s
    assert values["cpu_max_core_pct"] == pytest.approx(90.0, abs=1e-9)
    assert values["cpu_iowait_pct"] == pytest.approx(15.0, abs=1e-9)
    assert values["proc_cpu_pct"] == pytest.approx(70.0, abs=1e-9)  # 0.7 s of CPU in 1 s
    assert values["proc_rss_bytes"] == 123_456_789.0
    assert values["host_mem_used_bytes"] == 16 * 2**30  # total - available
    assert src.static() == {"host.cpu_count": 2, "host.mem_total_bytes": 64 * 2**30}


def test_guest_time_is_not_counted_twice():
    snapshots = [[cpu(0, 0)], [cpu(0, 0)], [cpu(1.0, 1.0, guest=0.5)]]
    src = HostSource(psutil_module=FakePsutil(snapshots, [(0, 0)] * 2), pid=1, clock=Clock())
    src._clock.t += 1.0
    assert src.read()["cpu_pct"] == pytest.approx(50.0, abs=1e-9)  # guest is inside user: 1.0 busy of 2.0, not of 2.5


def test_a_read_right_after_reset_has_no_cpu_share_rather_than_a_zero():
    snapshots = [[cpu(0, 0)], [cpu(0, 0)]]
    src = HostSource(psutil_module=FakePsutil(snapshots, [(0, 0), (0, 0)]), pid=1, clock=Clock())
    values = src.read()  # no time has passed on the clock
    assert "cpu_pct" not in values and "proc_cpu_pct" not in values
    assert values["proc_rss_bytes"] == 123_456_789.0


def test_no_iowait_on_this_os_is_reported_unavailable():
    Times = namedtuple("scputimes", "user system idle")
    ps = FakePsutil([[Times(0, 0, 0)], [Times(0, 0, 0)], [Times(1, 0, 1)]], [(0, 0)] * 3)
    src = HostSource(psutil_module=ps, pid=1, clock=Clock())
    assert "cpu_iowait_pct" not in src.series
    assert src.unavailable == {"cpu_iowait_pct": "this OS reports no iowait time (Linux only)"}


def test_link_peak_from_generation_and_width():
    assert link_peak_gbs(5, 16) == 63.008
    assert link_peak_gbs(4, 16) == 31.504
    assert link_peak_gbs(3, 8) == 7.88
    assert link_peak_gbs(None, 16) is None and link_peak_gbs(5, 0) is None and link_peak_gbs(99, 16) is None


def test_telemetry_package_does_not_import_torch():
    code = "import sys, gcdoctor.telemetry, gcdoctor.telemetry.nvml, gcdoctor.telemetry.mthreads; " \
           "assert 'torch' not in sys.modules and 'textual' not in sys.modules"
    subprocess.run([sys.executable, "-c", code], check=True)


def test_missing_psutil_marks_every_host_series_unavailable(monkeypatch):
    from gcdoctor.telemetry import TelemetrySampler, open_sources

    monkeypatch.setitem(sys.modules, "psutil", None)
    facts = TelemetrySampler(open_sources("cpu", None)).facts()
    assert facts.series == [] and facts.sources == []
    assert facts.unavailable == {s: "psutil not installed" for s in (
        "cpu_pct", "cpu_max_core_pct", "cpu_iowait_pct", "proc_cpu_pct", "proc_rss_bytes", "host_mem_used_bytes")}
