"""Live telemetry-only warnings: samples -> 1 s windows -> the GC040/GC041 rules on the last seconds.

The thresholds and the conditions live in the rules (rules/pcie_saturated_idle.py,
rules/device_starving_cpu.py); this module only cuts the stream into windows and runs those
rules on a short recent span, so a live warning and the verdict in the final report are the
same judgement over different spans. No Textual here: `gcdoctor monitor --no-tui` uses it too.
"""
from __future__ import annotations

from typing import Any

from gcdoctor.engine import evaluate_rule
from gcdoctor.types import Rule
from gcdoctor.run.events import LogMessage, VerdictIssued
from gcdoctor.facts import Environment, Facts
from gcdoctor.facts.monitor import MonitorFacts, TelemetryWindow
from gcdoctor.facts.telemetry import TelemetryFacts

# The series the telemetry-only rules read; the rest of a sample stays in telemetry.csv only.
DEVICE_WINDOW_SERIES = ("util_pct", "mem_used_bytes", "pcie_tx_gbs", "pcie_rx_gbs", "power_w")
HOST_WINDOW_SERIES = ("cpu_pct", "cpu_max_core_pct", "proc_cpu_pct")


def live_rules() -> list[Rule]:
    from gcdoctor.rules.device_starving_cpu import DeviceStarvingCpuRule
    from gcdoctor.rules.pcie_saturated_idle import PcieSaturatedIdleRule
    return [PcieSaturatedIdleRule(), DeviceStarvingCpuRule()]


def _kept(series: str, keep_proc: bool) -> bool:
    if "." in series:
        prefix, name = series.split(".", 1)
        return prefix.startswith("gpu") and name in DEVICE_WINDOW_SERIES
    return series in HOST_WINDOW_SERIES and (keep_proc or not series.startswith("proc_"))


class Windower:
    """Cuts (t, values) samples into windows of `window_s` seconds and keeps each window's means.

    keep_proc=False drops proc_* series: in `gcdoctor monitor` they describe the monitor itself,
    not the job it watches.
    """

    def __init__(self, window_s: float = 1.0, keep_proc: bool = True) -> None:
        self.window_s = window_s
        self.keep_proc = keep_proc
        self.windows: list[TelemetryWindow] = []
        self._t0: float | None = None
        self._start: float | None = None
        self._last_t: float | None = None
        self._sums: dict[str, float] = {}
        self._counts: dict[str, int] = {}
        self._keys: set[str] = set()
        self._n = 0

    def add(self, t: float, values: dict[str, float | None]) -> TelemetryWindow | None:
        """Add one sample; return the window it closed, if any."""
        closed = None
        if self._start is None:
            self._t0 = self._start = t
        elif t - self._start >= self.window_s:
            closed = self._close(t)
            self._start = t
        for k, v in values.items():
            if not _kept(k, self.keep_proc):
                continue
            self._keys.add(k)
            if v is not None:
                self._sums[k] = self._sums.get(k, 0.0) + v
                self._counts[k] = self._counts.get(k, 0) + 1
        self._n += 1
        self._last_t = t
        return closed

    def flush(self) -> TelemetryWindow | None:
        """Close the window in progress (at the end of a recording)."""
        if self._n == 0 or self._last_t is None or self._start is None:
            return None
        end = max(self._last_t, self._start + 1e-9)
        return self._close(end)

    def _close(self, end: float) -> TelemetryWindow:
        assert self._start is not None and self._t0 is not None
        values = {k: (self._sums[k] / self._counts[k] if self._counts.get(k) else None) for k in sorted(self._keys)}
        w = TelemetryWindow(t_start_s=round(self._start - self._t0, 3), duration_s=round(end - self._start, 3),
                            n_samples=self._n, values=values)
        self.windows.append(w)
        self._sums, self._counts, self._keys, self._n = {}, {}, set(), 0
        return w


class LiveAlerts:
    """Feeds telemetry samples through the windower and the telemetry-only rules.

    `feed` returns the events to emit: a VerdictIssued when a (rule, device) condition starts
    within the last `recent_windows` windows, a LogMessage when it clears. The monitor and the
    `--run` follower put these on the same bus as everything else.
    """

    def __init__(self, devices: list[str] | None = None, device_kind: str = "", window_s: float = 1.0,
                 recent_windows: int = 5, keep_proc: bool = True,
                 overrides: dict[str, dict[str, float]] | None = None,
                 telemetry: TelemetryFacts | None = None, environment: Environment | None = None,
                 rules: list[Rule] | None = None) -> None:
        self.windower = Windower(window_s, keep_proc)
        self.devices = devices
        self.device_kind = device_kind
        self.recent_windows = recent_windows
        self.overrides = overrides
        self.telemetry = telemetry
        self.environment = environment or Environment()
        self.rules = rules if rules is not None else live_rules()
        self.active: dict[tuple[str, str], dict[str, Any]] = {}  # key -> verdict dict while firing
        self.raised = 0

    @property
    def windows(self) -> list[TelemetryWindow]:
        return self.windower.windows

    def facts(self, windows: list[TelemetryWindow] | None = None) -> Facts:
        f = Facts(environment=self.environment, telemetry=self.telemetry)
        devices = self.devices if self.devices is not None else []
        f.monitor = MonitorFacts(device_kind=self.device_kind, devices=list(devices),
                                 window_s=self.windower.window_s,
                                 windows=list(self.windows if windows is None else windows))
        return f

    def feed(self, t: float, values: dict[str, float | None]) -> list[Any]:
        closed = self.windower.add(t, values)
        if closed is None or not self.rules:
            return []
        return self._judge_recent()

    def _judge_recent(self) -> list[Any]:
        facts = self.facts(self.windows[-self.recent_windows:])
        events: list[Any] = []
        for rule in self.rules:
            for v in evaluate_rule(rule, facts, self.overrides):
                key = v.key
                if v.status == "fired" and key not in self.active:
                    self.active[key] = v.to_dict()
                    self.raised += 1
                    events.append(VerdictIssued(v.to_dict()))
                elif v.status == "passed" and key in self.active:
                    del self.active[key]
                    where = f" on {v.subject}" if v.subject else ""
                    events.append(LogMessage(f"{v.code} {v.slug}{where} cleared", "info"))
        return events
