"""Shared reading of the monitor's telemetry windows for the telemetry-only rules (GC040, GC041)."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from gcdoctor.facts import Facts
from gcdoctor.facts.monitor import TelemetryWindow


def device_keys(facts: Facts) -> list[str]:
    """Devices the windows describe: the monitor's list, else the 'gpuN.' prefixes in the windows."""
    mon = facts.monitor
    if mon is None:
        return []
    if mon.devices:
        return list(mon.devices)
    keys = {k.split(".", 1)[0] for w in mon.windows for k in w.values if k.startswith("gpu") and "." in k}
    return sorted(keys, key=lambda k: int(k[3:]) if k[3:].isdigit() else 1 << 30)


def value(w: TelemetryWindow, series: str) -> float | None:
    return w.values.get(series)


def pcie_peak_gbs(facts: Facts, key: str) -> float | None:
    """Per-direction link peak of one device: its telemetry record, else the environment's."""
    tel = facts.telemetry
    if tel is not None:
        for d in tel.devices:
            if d.key == key and d.pcie_link_peak_gbs:
                return d.pcie_link_peak_gbs
    return facts.environment.pcie_peak_gbs or None


@dataclass
class Episode:
    """The windows in which a condition held, with their total duration."""

    windows: list[TelemetryWindow]
    seconds: float
    observed_seconds: float  # windows in which the condition could be evaluated

    @property
    def share_pct(self) -> float | None:
        return 100.0 * self.seconds / self.observed_seconds if self.observed_seconds else None

    def mean(self, series: str) -> float | None:
        vals = [v for w in self.windows if (v := w.values.get(series)) is not None]
        return sum(vals) / len(vals) if vals else None


def collect(windows: list[TelemetryWindow], condition: Callable[[TelemetryWindow], bool | None]) -> Episode:
    """Windows where `condition` is True; None from the condition means "cannot tell" (not counted)."""
    hit: list[TelemetryWindow] = []
    observed = 0.0
    for w in windows:
        c = condition(w)
        if c is None:
            continue
        observed += w.duration_s
        if c:
            hit.append(w)
    return Episode(hit, sum(w.duration_s for w in hit), observed)
