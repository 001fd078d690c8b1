"""The dashboard's model: events folded into what the panels show, without a terminal."""
from __future__ import annotations

from gcdoctor.run.events import (MeasurementRecorded, ProbeStarted, Progress, RunFinished, RunStarted, StepMeasured,
                             TelemetrySampled, VerdictIssued)
from gcdoctor.tui.gauges import diagnose_rows
from gcdoctor.tui.render import bar, fmt_pair_bytes, fmt_seconds, sparkline
from gcdoctor.tui.state import DashboardState, TelemetryHistory


def started(**settings) -> RunStarted:
    return RunStarted("/runs/x", "diagnose", {"model": "m", "probes": ["sweep"], **settings},
                      {"device_kind": "cuda", "total_memory_bytes": 141e9, "pcie_peak_gbs": 63.0})


def test_sparkline_uses_a_fixed_scale_and_blanks_for_missing_values():
    assert sparkline([0, 50, 100, None], 4, 100) == "▁▅█ "
    assert sparkline([10, 20], 4, 100) == "  ▁▂"  # left-padded; 20% of the scale is low, not "the max"


def test_bar_and_formats():
    assert bar(0.5, 8) == "████░░░░"
    assert bar(None, 3) == "···"
    assert fmt_pair_bytes(12.3e9, 141e9) == "12.3/141 GB"
    assert fmt_seconds(75) == "1 min 15 s"


def test_columns_average_samples_per_second_counted_back_from_the_newest():
    h = TelemetryHistory()
    for i in range(40):  # 4 s at 10 Hz: 0.0 .. 3.9; second k holds value k*10
        h.add(i / 10, {"gpu0.util_pct": float(int(i / 10) * 10)})
    assert h.columns("gpu0.util_pct", 5) == [None, 0.0, 10.0, 20.0, 30.0]
    assert h.device_keys() == ["gpu0"]


def test_point_progress_and_eta_from_the_median_step():
    st = DashboardState(clock=lambda: 0.0)
    st.apply(started(warmup_steps=1, measure_steps=3))
    st.apply(ProbeStarted("sweep", "batch sweep"))
    st.apply(Progress("sweep", "gc", 8, 0, 2, "fixed"))
    for i, ms in enumerate([400.0, 100.0]):
        st.apply(StepMeasured("sweep", "gc", 8, i, ms))
    p = st.probe
    assert p.point_fraction() == 0.5
    assert p.step_ms() == 250.0
    assert p.point_eta_s() == 0.5  # 2 steps left x 250 ms
    assert p.plan_eta_s() == 0.5 + 1 * 1.0  # one more point of 4 steps x 250 ms
    assert p.plan_fraction() == 0.25


def test_steps_per_point_is_learned_when_the_settings_do_not_say():
    st = DashboardState(clock=lambda: 0.0)
    st.apply(started())
    st.apply(ProbeStarted("sweep"))
    for i in range(4):
        st.apply(StepMeasured("sweep", "no_gc", 1, i, 10.0))
    st.apply(MeasurementRecorded("sweep", {"variant": "no_gc", "batch": 1, "fits": True}))
    assert st.probe.steps_per_point == 4


def test_a_reissued_verdict_replaces_its_entry_and_the_list_is_most_severe_first():
    st = DashboardState()
    st.apply(VerdictIssued({"code": "GC005", "subject": "", "severity": "info", "headline": "a"}))
    st.apply(VerdictIssued({"code": "GC001", "subject": "", "severity": "ok", "headline": "b"}))
    st.apply(VerdictIssued({"code": "GC001", "subject": "", "severity": "warning", "headline": "c"}))
    assert [e.verdict["headline"] for e in st.sorted_verdicts()] == ["c", "a"]


def test_out_of_memory_rows_are_logged_as_warnings():
    st = DashboardState()
    st.apply(MeasurementRecorded("sweep", {"variant": "gc", "batch": 64, "fits": False, "oom_phase": "backward"}))
    assert (st.log[-1].text, st.log[-1].level) == ("gc batch 64: out of memory in backward", "warning")


def test_device_rows_say_unavailable_for_series_never_measured():
    st = DashboardState()
    st.apply(started())
    st.apply(TelemetrySampled(1.0, {"gpu0.util_pct": 80.0, "gpu0.mem_used_bytes": 20e9,
                                    "gpu0.pcie_rx_gbs": None, "cpu_pct": 12.0}))
    rows = {r.label: r for r in diagnose_rows(st, wide=False)}
    assert rows["GPU util"].value == "80%"
    assert rows["GPU mem"].value == "20.0/141 GB"
    assert rows["GPU mem"].top == 141e9
    assert rows["PCIe H→D"].series is None and rows["PCIe H→D"].note == "not measured"
    assert rows["CPU"].value == "12%"


def test_run_finished_keeps_the_report_path_and_ends_the_probe():
    st = DashboardState()
    st.apply(started())
    st.apply(ProbeStarted("sweep"))
    st.apply(RunFinished("/runs/x", True, None, "/runs/x/report.md"))
    assert st.probe is None and st.finished.report_path == "/runs/x/report.md"
    assert st.log[-1].text == "report: /runs/x/report.md"
