"""Facts of the telemetry sampler (filled in by gcdoctor.telemetry).

Series are named `gpuN.<metric>` for device series (N = the device as the training process
numbers it) and `<metric>` for host series; see gcdoctor/telemetry/__init__.py for the list.
A series is either in `series` (measured) or in `unavailable` with the reason, never a silent 0.
"""
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
class TelemetryDevice:
    """Static facts of one device as its telemetry source saw it."""

    key: str = ""  # series prefix, e.g. "gpu0"
    source: str = ""  # nvml | pymtml | mthreads-gmi
    index: int | None = None  # the management library's own index (differs under *_VISIBLE_DEVICES)
    name: str | None = None
    uuid: str | None = None
    total_memory_bytes: int | None = None
    pcie_link_gen_current: int | None = None  # at open; GPUs drop the link generation when idle
    pcie_link_gen_max: int | None = None  # what this device and this system can reach
    pcie_link_gen_seen_max: int | None = None  # highest current generation seen while sampling
    pcie_link_width_current: int | None = None
    pcie_link_width_max: int | None = None
    pcie_link_peak_gbs: float | None = None  # per direction, at max generation and width


@dataclass
class TelemetryFacts:
    source: str = ""  # e.g. "nvml+psutil"
    rate_hz: float | None = None
    series: list[str] = field(default_factory=list)  # series that were measured
    unavailable: dict[str, str] = field(default_factory=dict)  # series -> why not
    static: dict[str, float | str | None] = field(default_factory=dict)  # link gen/width/peak etc.
    samples: int = 0
    path: str | None = None  # telemetry.csv in the run directory
    sources: list[str] = field(default_factory=list)  # sources that opened, e.g. ["nvml", "host"]
    devices: list[TelemetryDevice] = field(default_factory=list)
    pcie_link_peak_gbs: float | None = None  # of the first device; None where unknown
    duration_s: float | None = None  # first to last sample
    achieved_rate_hz: float | None = None  # samples per second actually taken
    missed_ticks: int = 0  # ticks skipped because the sampler thread ran late (GIL held, no free CPU)
    read_errors: dict[str, str] = field(default_factory=dict)  # source -> last error while sampling
    notes: list[str] = field(default_factory=list)  # caveats, e.g. "power is a 1 s average"
    overhead_cpu_pct: float | None = None  # sampler + poller threads + readers catching up, % of one core
