"""The telemetry rows of each panel: which series, against which scale, how the value reads.

A row whose series was never measured says "unavailable" (with the reason where known)
rather than drawing a flat line that looks like a 0. No Textual here.
"""
from __future__ import annotations

from dataclasses import dataclass

from gcdoctor.tui.render import fmt_bytes, fmt_gbs, fmt_pair_bytes, fmt_pct
from gcdoctor.tui.state import DashboardState


@dataclass
class GaugeRow:
    label: str
    series: str | None  # None: unavailable
    top: float | None  # the fixed scale of the sparkline (None: the largest value seen)
    value: str  # the current value, as text
    note: str = ""  # why it is unavailable


def _unavailable(label: str, note: str) -> GaugeRow:
    return GaugeRow(label, None, None, "", note)


def device_rows(state: DashboardState, key: str | None, wide: bool, with_power: bool = False) -> list[GaugeRow]:
    """Utilisation, memory used against the card's total, PCIe each way against the link peak."""
    tel = state.telemetry
    cpu_run = state.environment.get("device_kind") == "cpu"
    why = "CPU run" if cpu_run else "not measured"

    def row(label: str, name: str, top: float | None, value) -> GaugeRow:
        series = f"{key}.{name}" if key else None
        if series is None or not tel.has(series):
            return _unavailable(label, why)
        return GaugeRow(label, series, top, value(series))

    total = state.memory_total_bytes(key)
    peak = state.pcie_peak_gbs(key)
    rows = [
        row("GPU util", "util_pct", 100.0, lambda s: fmt_pct(tel.recent(s))),
        row("GPU mem", "mem_used_bytes", total, lambda s: fmt_pair_bytes(tel.latest(s), total)),
        row("PCIe H→D", "pcie_rx_gbs", peak, lambda s: fmt_gbs(tel.recent(s), peak)),
        row("PCIe D→H", "pcie_tx_gbs", peak, lambda s: fmt_gbs(tel.recent(s), peak)),
    ]
    if wide or with_power:
        rows.append(row("power", "power_w", None, lambda s: f"{tel.recent(s):.0f} W" if tel.recent(s) is not None
                        else "—"))
    return rows


def host_rows(state: DashboardState, wide: bool, with_process: bool = True) -> list[GaugeRow]:
    """System CPU (and its busiest core); on wide screens host memory and the run's own process."""
    tel = state.telemetry

    def row(label: str, series: str, top: float | None, value) -> GaugeRow:
        if not tel.has(series):
            return _unavailable(label, "not measured")
        return GaugeRow(label, series, top, value(series))

    def cpu_text(s: str) -> str:
        core = tel.recent("cpu_max_core_pct")
        text = fmt_pct(tel.recent(s))
        return f"{text} core {fmt_pct(core)}" if core is not None else text

    rows = [row("CPU", "cpu_pct", 100.0, cpu_text)]
    if wide:
        host_total = state.environment.get("host_memory_bytes")
        rows.append(row("host mem", "host_mem_used_bytes", host_total,
                        lambda s: fmt_pair_bytes(tel.latest(s), host_total)))
        if with_process:
            ncpu = state.environment.get("cpu_count") or 1
            rows.append(row("proc CPU", "proc_cpu_pct", 100.0 * ncpu, lambda s: fmt_pct(tel.recent(s))))
            rows.append(row("proc RSS", "proc_rss_bytes", host_total, lambda s: fmt_bytes(tel.latest(s))))
    return rows


def diagnose_rows(state: DashboardState, wide: bool) -> list[GaugeRow]:
    """The diagnose screen's telemetry panel: the run's device, then the host."""
    return device_rows(state, state.device_key(), wide) + host_rows(state, wide)
