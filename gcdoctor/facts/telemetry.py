"""Facts of the telemetry sampler (filled in by gcdoctor.telemetry)."""
from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class SeriesSummary:
    """One telemetry series over a window (a step, a variant)."""

    mean: float | None = None
    min: float | None = None
    max: float | None = None
    n: int = 0


@dataclass
class TelemetryFacts:
    source: str = ""  # e.g. "nvml+psutil"
    rate_hz: float | None = None
    series: list[str] = field(default_factory=list)  # series that were measured
    unavailable: dict[str, str] = field(default_factory=dict)  # series -> why not
    static: dict[str, float | str | None] = field(default_factory=dict)  # link gen/width/peak etc.
    samples: int = 0
    path: str | None = None  # telemetry.csv in the run directory
