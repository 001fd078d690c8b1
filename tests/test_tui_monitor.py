"""gcdoctor monitor without a terminal: windows, live warnings, following a run, the recording."""
from __future__ import annotations

import json
import threading
from pathlib import Path

import pytest

from gcdoctor.cli import main
from gcdoctor.run.events import LogMessage, RunFinished, RunStarted, TelemetrySampled, VerdictIssued, event_to_json
from gcdoctor.facts import Facts
from gcdoctor.telemetry.base import Source
from gcdoctor.tui.alerts import LiveAlerts, Windower
from gcdoctor.monitor.session import MonitorSession
from gcdoctor.tui.sources import FollowSource

STALL = {"gpu0.util_pct": 5.0, "gpu0.pcie_rx_gbs": 56.0, "gpu0.pcie_tx_gbs": 0.5, "gpu0.mem_used_bytes": 40e9,
         "cpu_max_core_pct": 30.0, "proc_cpu_pct": 20.0}
BUSY = {**STALL, "gpu0.util_pct": 97.0, "gpu0.pcie_rx_gbs": 2.0}


def feed(alerts: LiveAlerts, seconds: int, values: dict, t0: float, hz: int = 10) -> list:
    out = []
    for i in range(seconds * hz):
        out += alerts.feed(t0 + i / hz, values)
    return out


def test_windower_means_and_drops_the_monitors_own_process_series():
    w = Windower(1.0, keep_proc=False)
    for i in range(25):
        w.add(i / 10, {"gpu0.util_pct": float(i // 10 * 10), "proc_cpu_pct": 50.0, "gpu0.sm_clock_mhz": 1980.0})
    w.flush()
    assert [x.values for x in w.windows] == [{"gpu0.util_pct": 0.0}, {"gpu0.util_pct": 10.0},
                                            {"gpu0.util_pct": 20.0}]
    assert [x.n_samples for x in w.windows] == [10, 10, 5]


def test_a_live_warning_is_raised_once_while_it_lasts_and_cleared_after():
    from gcdoctor.facts import Environment
    alerts = LiveAlerts(environment=Environment(pcie_peak_gbs=63.0))
    assert feed(alerts, 2, BUSY, 0.0) == []
    raised = feed(alerts, 6, STALL, 2.0)
    assert [type(e).__name__ for e in raised] == ["VerdictIssued"]
    assert raised[0].verdict["code"] == "GC040" and raised[0].verdict["subject"] == "gpu0"
    cleared = feed(alerts, 6, BUSY, 8.0)
    assert [e.text for e in cleared if isinstance(e, LogMessage)] == ["GC040 pcie-saturated-idle on gpu0 cleared"]


def write_lines(path: Path, events: list, partial_tail: str = "") -> None:
    with open(path, "a") as fh:
        for ev in events:
            fh.write(event_to_json(ev, wall=0.0) + "\n")
        fh.write(partial_tail)


def test_follow_source_tails_a_growing_file_and_waits_for_whole_lines(tmp_path: Path):
    events = tmp_path / "events.jsonl"
    write_lines(events, [RunStarted(str(tmp_path), "diagnose", {}, {"pcie_peak_gbs": 63.0})])
    got: list = []
    src = FollowSource(tmp_path, poll_s=0.02, stop_at_finish=True)
    src.start(got.append, lambda: None)
    line = event_to_json(LogMessage("hello"), wall=0.0)
    write_lines(events, [], partial_tail=line[:10])  # a writer caught mid-line
    write_lines(events, [], partial_tail=line[10:] + "\n")
    write_lines(events, [RunFinished(str(tmp_path), report_path="r.md")])
    src.join(5.0)
    assert src.done.is_set()
    assert [type(e).__name__ for e in got] == ["RunStarted", "LogMessage", "RunFinished"]
    assert got[1].text == "hello"


def test_follow_source_runs_the_live_rules_on_the_followed_telemetry(tmp_path: Path):
    evs = [RunStarted(str(tmp_path), "watch", {}, {"pcie_peak_gbs": 63.0})]
    evs += [TelemetrySampled(i / 10, STALL) for i in range(60)] + [RunFinished(str(tmp_path))]
    write_lines(tmp_path / "events.jsonl", evs)
    got: list = []
    FollowSource(tmp_path, alerts=LiveAlerts(), poll_s=0.01, stop_at_finish=True).run_here(got.append)
    fired = [e.verdict["code"] for e in got if isinstance(e, VerdictIssued)]
    assert fired == ["GC040"]


class StalledGpu(Source):
    """Stands in for NVML: one H200 whose link is saturated while it idles, one process."""

    name = "fake-nvml"

    def __init__(self) -> None:
        super().__init__()
        self.series = [f"gpu0.{s}" for s in ("util_pct", "mem_used_bytes", "mem_total_bytes", "pcie_tx_gbs",
                                            "pcie_rx_gbs")]

    def read(self):
        return {"gpu0.util_pct": 4.0, "gpu0.mem_used_bytes": 50e9, "gpu0.mem_total_bytes": 141e9,
                "gpu0.pcie_tx_gbs": 0.3, "gpu0.pcie_rx_gbs": 57.0}

    def static(self):
        return {"gpu0.name": "NVIDIA H200", "gpu0.total_memory_bytes": 141_000_000_000, "gpu0.pcie_link_peak_gbs": 63.0}

    def processes(self):
        return [{"device": "gpu0", "pid": 4242, "used_memory_bytes": 50e9, "name": "python"}]


def test_monitor_session_records_a_run_directory_with_the_warning(tmp_path: Path):
    out = tmp_path / "mon"
    m = MonitorSession(rate_hz=50, out=str(out), seconds=1.3, sources=[StalledGpu()], device_kind="cuda",
                       thresholds={"GC040": {"min_seconds": 0.5}})
    seen: list = []
    m.bus.subscribe(seen.append)
    m.run()
    assert {p.name for p in out.iterdir()} >= {"events.jsonl", "facts.json", "telemetry.csv", "report.md"}
    facts = Facts.load(out / "facts.json")
    assert facts.monitor.devices == ["gpu0"] and len(facts.monitor.windows) >= 1
    assert facts.monitor.processes[0].pid == 4242 and facts.monitor.processes[0].name == "python"
    assert facts.telemetry.pcie_link_peak_gbs == 63.0
    codes = [(e.verdict["code"], e.verdict["status"]) for e in seen if isinstance(e, VerdictIssued)]
    assert ("GC040", "fired") in codes
    assert "GC040" in (out / "report.md").read_text()
    kinds = [json.loads(x)["type"] for x in (out / "events.jsonl").read_text().splitlines()]
    assert kinds[0] == "RunStarted" and kinds[-1] == "RunFinished" and "TelemetrySampled" in kinds


def test_monitor_command_records_host_telemetry_when_there_is_no_gpu(tmp_path: Path, capsys):
    if Path("/proc/driver/nvidia").exists():
        pytest.skip("this test is for a machine without GPU telemetry")
    out = tmp_path / "rec"
    assert main(["monitor", "--no-tui", "--seconds", "0.5", "--out", str(out)]) == 0
    facts = Facts.load(out / "facts.json")
    assert facts.monitor.device_kind == "cpu" and facts.telemetry.samples >= 2
    assert "no GPU telemetry" in capsys.readouterr().out


@pytest.mark.parametrize("argv, message", [
    (["monitor", "--run", "/nonexistent/run"], "--run /nonexistent/run: no such directory"),
    (["monitor", "--no-tui", "--seconds", "0"], "gcdoctor monitor: argument --seconds: 0 must be a finite number above 0"),
])
def test_monitor_user_errors_are_one_line(argv, message, capsys):
    assert main(argv) == 2
    assert capsys.readouterr().err.strip() == f"gcdoctor: error: {message}"


def test_monitor_stops_when_asked(tmp_path: Path):
    m = MonitorSession(rate_hz=20, out=str(tmp_path / "m"), sources=[StalledGpu()], device_kind="cuda")
    t = threading.Thread(target=m.run)
    t.start()
    m.stop_requested.set()
    t.join(10)
    assert not t.is_alive() and (tmp_path / "m" / "report.md").exists()
