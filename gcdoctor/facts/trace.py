"""Metrics computed from a profiler trace (filled in by gcdoctor.trace)."""
from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class TraceMetrics:
    """Device-side metrics of one trace window (a profiler step, a labelled region, a file)."""

    source: str = ""  # trace file (relative to the run directory when inside one)
    window: str = "all"
    device_kind: str | None = None  # cuda | musa | cpu | None (CPU-only trace)
    wall_us: float | None = None
