"""Facts of `gcdoctor monitor`: telemetry of a training job in another process, in windows.

The monitor cuts its samples into short windows (1 s by default) and keeps each window's mean
of the series that the telemetry-only rules read (GC040 pcie-saturated-idle, GC041
device-starving-cpu). Rules judge the windows, so a recorded monitor run can be re-judged
with other thresholds by `gcdoctor analyze`.
"""
from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class TelemetryWindow:
    """Means of the sampled series over one window of the recording."""

    t_start_s: float = 0.0  # since the first sample
    duration_s: float = 0.0
    n_samples: int = 0
    values: dict[str, float | None] = field(default_factory=dict)  # series -> mean; None: no sample


@dataclass
class MonitoredProcess:
    device: str = ""  # "gpu0"
    pid: int = 0
    name: str | None = None  # None where the PID is not visible (another container)
    max_used_memory_bytes: int | None = None
    first_seen_s: float | None = None
    last_seen_s: float | None = None


@dataclass
class MonitorFacts:
    device_kind: str = ""  # cuda | musa | cpu (host only: no device telemetry)
    devices: list[str] = field(default_factory=list)  # device keys monitored, e.g. ["gpu0", "gpu1"]
    window_s: float = 1.0
    duration_s: float | None = None
    windows: list[TelemetryWindow] = field(default_factory=list)
    processes: list[MonitoredProcess] = field(default_factory=list)
    # the host series describe the monitor's host, not the job; proc_* series are not recorded,
    # because the monitor's own process is not the job being watched
    followed_run: str | None = None  # `--run DIR`: the run directory that was followed
