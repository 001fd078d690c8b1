"""GC040 pcie-saturated-idle and GC041 device-starving-cpu: facts that must fire them, facts that must not."""
from __future__ import annotations

from gcdoctor.engine import evaluate_rule
from gcdoctor.facts import Facts
from gcdoctor.facts.monitor import MonitorFacts, TelemetryWindow
from gcdoctor.facts.telemetry import TelemetryDevice, TelemetryFacts
from gcdoctor.rules import find_rule
from gcdoctor.rules.device_starving_cpu import DeviceStarvingCpuRule
from gcdoctor.rules.pcie_saturated_idle import PcieSaturatedIdleRule

GEN5_X16_GBS = 63.008  # 3.938 GB/s per lane x 16, gcdoctor.model.hardware.PCIE_GBS_PER_LANE


def facts_of(windows: list[dict], devices=("gpu0",), peak: float | None = GEN5_X16_GBS) -> Facts:
    f = Facts()
    f.monitor = MonitorFacts(device_kind="cuda", devices=list(devices), windows=[
        TelemetryWindow(t_start_s=float(i), duration_s=1.0, n_samples=10, values=v) for i, v in enumerate(windows)])
    f.telemetry = TelemetryFacts(devices=[TelemetryDevice(key=k, pcie_link_peak_gbs=peak) for k in devices])
    return f


def offload_stall(util: float, rx: float) -> dict:
    return {"gpu0.util_pct": util, "gpu0.pcie_rx_gbs": rx, "gpu0.pcie_tx_gbs": 1.0,
            "gpu0.mem_used_bytes": 60e9, "cpu_max_core_pct": 40.0}


def test_gc040_fires_on_four_seconds_of_saturated_link_with_idle_device():
    f = facts_of([offload_stall(95, 2)] * 2 + [offload_stall(10, 55)] * 4 + [offload_stall(95, 2)] * 2)
    (v,) = evaluate_rule(PcieSaturatedIdleRule(), f)
    assert (v.status, v.severity, v.subject) == ("fired", "warning", "gpu0")
    assert v.headline == ("gpu0: PCIe host to device at 87% of the link for 4 s while the device was busy "
                          "only 10% of the time")
    ev = {e.label: e.value for e in v.evidence}
    assert ev["time in the condition"] == 4.0
    assert ev["share of the monitored time"] == 50.0
    assert ev["PCIe link peak per direction"] == GEN5_X16_GBS


def test_gc040_passes_when_the_saturation_is_shorter_than_min_seconds():
    f = facts_of([offload_stall(95, 2)] * 5 + [offload_stall(10, 55)] * 2)
    (v,) = evaluate_rule(PcieSaturatedIdleRule(), f)
    assert v.status == "passed"


def test_gc040_passes_when_the_device_is_busy_during_the_copies():
    f = facts_of([offload_stall(80, 55)] * 10)
    (v,) = evaluate_rule(PcieSaturatedIdleRule(), f)
    assert v.status == "passed"


def test_gc040_is_inconclusive_without_a_link_peak():
    f = facts_of([offload_stall(10, 55)] * 10, peak=None)
    (v,) = evaluate_rule(PcieSaturatedIdleRule(), f)
    assert (v.status, v.subject) == ("inconclusive", "gpu0")
    assert "link peak" in v.headline


def test_gc040_judges_each_device_apart():
    stalled = {**offload_stall(10, 55)}
    busy = {"gpu1.util_pct": 99.0, "gpu1.pcie_rx_gbs": 1.0, "gpu1.pcie_tx_gbs": 1.0}
    f = facts_of([{**stalled, **busy}] * 5, devices=("gpu0", "gpu1"))
    got = {v.subject: v.status for v in evaluate_rule(PcieSaturatedIdleRule(), f)}
    assert got == {"gpu0": "fired", "gpu1": "passed"}


def test_gc040_is_inconclusive_for_a_host_only_recording():
    f = Facts()
    f.monitor = MonitorFacts(device_kind="cpu", windows=[TelemetryWindow(0, 1, 10, {"cpu_pct": 50.0})])
    (v,) = evaluate_rule(PcieSaturatedIdleRule(), f)
    assert v.status == "inconclusive"


def host_bound(util: float, core: float, mem: float = 30e9) -> dict:
    return {"gpu0.util_pct": util, "gpu0.mem_used_bytes": mem, "cpu_max_core_pct": core, "cpu_pct": 15.0}


def test_gc041_fires_when_the_device_idles_beside_a_saturated_core():
    f = facts_of([host_bound(12, 100)] * 6 + [host_bound(90, 60)] * 4)
    (v,) = evaluate_rule(DeviceStarvingCpuRule(), f)
    assert (v.status, v.severity, v.subject) == ("fired", "warning", "gpu0")
    assert v.headline == ("gpu0: the device was busy only 12% of the time for 6 s while a CPU core at 100%: "
                          "it is waiting for the host")


def test_gc041_fires_on_a_followed_run_whose_process_uses_a_full_core():
    w = {"gpu0.util_pct": 5.0, "gpu0.mem_used_bytes": 30e9, "cpu_max_core_pct": 80.0, "proc_cpu_pct": 100.0}
    (v,) = evaluate_rule(DeviceStarvingCpuRule(), facts_of([w] * 4))
    assert v.status == "fired"
    assert {e.label: e.value for e in v.evidence}["training process CPU during it (100 = one core)"] == 100.0


def test_gc041_ignores_an_idle_device_that_holds_no_job():
    f = facts_of([host_bound(0, 100, mem=0.4e9)] * 10)  # a bare context, no job
    (v,) = evaluate_rule(DeviceStarvingCpuRule(), f)
    assert v.status == "passed"


def test_gc041_passes_when_the_cpu_has_headroom():
    f = facts_of([host_bound(10, 70)] * 10)
    (v,) = evaluate_rule(DeviceStarvingCpuRule(), f)
    assert v.status == "passed"


def test_thresholds_are_overridable_by_code():
    f = facts_of([host_bound(10, 100)] * 4)
    (v,) = evaluate_rule(DeviceStarvingCpuRule(), f, {"GC041": {"min_seconds": 5}})
    assert v.status == "passed"


def test_both_rules_are_registered_with_four_section_docstrings():
    for code in ("GC040", "GC041"):
        doc = find_rule(code).doc()
        heads = [h for h in ("What it checks:", "Why it matters:", "Evidence:", "How to fix:") if h in doc]
        assert heads == ["What it checks:", "Why it matters:", "Evidence:", "How to fix:"]
        assert [doc.index(h) for h in heads] == sorted(doc.index(h) for h in heads)
