"""What the dashboard shows, built from the session's events. No Textual here.

`DashboardState.apply(event)` folds one event into the state and says which parts changed, so
the app re-renders only those. Keeping this apart from the widgets makes every number on the
screen testable from a recorded `events.jsonl`, and lets the diagnose, follow and monitor
screens share one model.
"""
from __future__ import annotations

import statistics
import time
from collections import deque
from dataclasses import dataclass, field
from typing import Any, Callable

from gcdoctor.run.events import (LogMessage, MeasurementRecorded, ProbeFinished, ProbeStarted, Progress, RunFinished,
                             RunStarted, StepMeasured, TelemetrySampled, VerdictIssued)
from gcdoctor.types import SEVERITY_ORDER


class TelemetryHistory:
    """Recent telemetry samples, kept as (t, values) in a bounded ring.

    4000 samples hold 200 s at the diagnose rate of 20 Hz: more than the widest sparkline
    (one cell per second) on a 200-column terminal.
    """

    def __init__(self, maxlen: int = 4000) -> None:
        self.samples: deque[tuple[float, dict[str, float | None]]] = deque(maxlen=maxlen)
        self.offered: set[str] = set()  # series the sampler offers (may all be None)
        self.measured: set[str] = set()  # series that had at least one value
        self.count = 0

    def add(self, t: float, values: dict[str, float | None]) -> None:
        self.samples.append((t, values))
        self.count += 1
        self.offered.update(values)
        self.measured.update(k for k, v in values.items() if v is not None)

    @property
    def last_t(self) -> float | None:
        return self.samples[-1][0] if self.samples else None

    def has(self, series: str) -> bool:
        return series in self.measured

    def device_keys(self) -> list[str]:
        """Device prefixes ('gpu0', 'gpu1', ...) seen in the samples, in numeric order."""
        keys = {s.split(".", 1)[0] for s in self.offered if s.startswith("gpu") and "." in s}
        return sorted(keys, key=lambda k: int(k[3:]) if k[3:].isdigit() else 1 << 30)

    def columns(self, series: str, width: int, seconds_per_column: float = 1.0) -> list[float | None]:
        """Mean of `series` per column of `seconds_per_column`, newest at the right, `width` long.

        Columns are counted back from the newest sample's time, so the picture depends only
        on the samples (deterministic for a recorded stream). Empty columns are None.
        """
        sums = [0.0] * width
        counts = [0] * width
        last = self.last_t
        if last is None or width <= 0:
            return [None] * max(width, 0)
        for t, values in reversed(self.samples):
            col = int((last - t) / seconds_per_column)
            if col >= width:
                break
            v = values.get(series)
            if v is not None:
                sums[col] += v
                counts[col] += 1
        return [sums[i] / counts[i] if counts[i] else None for i in range(width - 1, -1, -1)]

    def recent(self, series: str, seconds: float = 1.0) -> float | None:
        """Mean of `series` over the last `seconds` (single host CPU samples are coarse)."""
        last = self.last_t
        if last is None:
            return None
        vals = []
        for t, values in reversed(self.samples):
            if last - t > seconds:
                break
            v = values.get(series)
            if v is not None:
                vals.append(v)
        return sum(vals) / len(vals) if vals else None

    def latest(self, series: str) -> float | None:
        for _, values in reversed(self.samples):
            v = values.get(series)
            if v is not None:
                return v
        return None


@dataclass
class ProbeProgress:
    """The probe in progress: where it is in its plan and in the current measurement point."""

    name: str
    description: str = ""
    variant: str = ""
    batch_size: int | None = None
    message: str = ""
    done_units: int = 0
    total_units: int | None = None
    phase: str = ""
    steps_per_point: int | None = None  # warmup + measured steps, when the settings say
    point_key: tuple[str, int] | None = None
    point_steps_ms: list[float] = field(default_factory=list)
    points_done: int = 0
    point_seconds: list[float] = field(default_factory=list)  # summed step time of finished points

    def point_fraction(self) -> float | None:
        if not self.steps_per_point:
            return None
        return min(1.0, len(self.point_steps_ms) / self.steps_per_point)

    def step_ms(self) -> float | None:
        """Typical step time of the current point: the median of its steps so far."""
        return statistics.median(self.point_steps_ms) if self.point_steps_ms else None

    def point_eta_s(self) -> float | None:
        """Time left in the current point: steps left x the median step so far."""
        ms = self.step_ms()
        if ms is None or not self.steps_per_point:
            return None
        return max(0, self.steps_per_point - len(self.point_steps_ms)) * ms / 1000

    def plan_fraction(self) -> float | None:
        if not self.total_units:
            return None
        return min(1.0, (self.done_units + (self.point_fraction() or 0.0)) / self.total_units)

    def plan_eta_s(self) -> float | None:
        """Time left in the probe's plan, when the plan has a known size (fixed batch sizes)."""
        point_eta = self.point_eta_s()
        if not self.total_units or point_eta is None:
            return None
        if self.point_seconds:
            per_point = statistics.mean(self.point_seconds)
        else:
            per_point = (self.steps_per_point or 0) * (self.step_ms() or 0) / 1000
        remaining = max(0, self.total_units - self.done_units - 1)
        return point_eta + remaining * per_point


@dataclass
class VerdictEntry:
    verdict: dict[str, Any]
    order: int  # first appearance: the list keeps its order while a verdict is re-issued
    updates: int = 0

    @property
    def key(self) -> tuple[str, str]:
        return (self.verdict.get("code", ""), self.verdict.get("subject", "") or "")


@dataclass
class LogLine:
    text: str
    level: str = "info"


class DashboardState:
    """Everything the dashboard shows. `apply` returns the names of the parts that changed:
    header, telemetry, probe, table, verdicts, log, status."""

    def __init__(self, clock: Callable[[], float] = time.monotonic, max_log: int = 1000) -> None:
        self.clock = clock
        self.run_dir: str | None = None
        self.command = ""
        self.settings: dict[str, Any] = {}
        self.environment: dict[str, Any] = {}
        self.telemetry = TelemetryHistory()
        self.probe: ProbeProgress | None = None
        self.probes_finished: list[ProbeFinished] = []
        self.rows: list[tuple[str, dict[str, Any]]] = []
        self.verdicts: dict[tuple[str, str], VerdictEntry] = {}
        self.log: deque[LogLine] = deque(maxlen=max_log)
        self.finished: RunFinished | None = None
        self.started_at: float | None = None
        self.finished_at: float | None = None
        self.stopping = False
        self.failure: str | None = None  # the front end's own failure (e.g. the session raised)
        self.log_total = 0  # lines ever logged (the log keeps the last max_log)

    def _log(self, line: LogLine) -> None:
        self.log.append(line)
        self.log_total += 1

    def add_log(self, text: str, level: str = "info") -> None:
        """A line from the front end itself (e.g. 'stopping...')."""
        self._log(LogLine(text, level))

    # -- folding events ------------------------------------------------------------------------
    def apply(self, ev: Any) -> set[str]:
        handler = getattr(self, f"_on_{type(ev).__name__}", None)
        return handler(ev) if handler else set()

    def _on_RunStarted(self, ev: RunStarted) -> set[str]:
        self.run_dir, self.command = ev.run_dir, ev.command
        self.settings, self.environment = dict(ev.settings), dict(ev.environment)
        self.started_at = self.clock()
        return {"header", "status", "telemetry"}

    def _on_ProbeStarted(self, ev: ProbeStarted) -> set[str]:
        self.probe = ProbeProgress(ev.probe, ev.description, total_units=ev.total_units,
                                   steps_per_point=self._steps_per_point())
        self._log(LogLine(f"probe {ev.probe}: {ev.description}" if ev.description else f"probe {ev.probe}"))
        return {"probe", "log", "status"}

    def _steps_per_point(self) -> int | None:
        w, m = self.settings.get("warmup_steps"), self.settings.get("measure_steps")
        return w + m if isinstance(w, int) and isinstance(m, int) else None

    def _ensure_probe(self, name: str) -> ProbeProgress:
        if self.probe is None or self.probe.name != name:
            self.probe = ProbeProgress(name, steps_per_point=self._steps_per_point())
        return self.probe

    def _on_Progress(self, ev: Progress) -> set[str]:
        p = self._ensure_probe(ev.probe)
        p.variant, p.batch_size, p.message = ev.variant, ev.batch_size, ev.message
        p.done_units, p.total_units = ev.done_units, ev.total_units if ev.total_units is not None else p.total_units
        p.point_key, p.point_steps_ms, p.phase = None, [], ""
        changed = {"probe"}
        if ev.message:
            what = " ".join(x for x in (ev.variant, f"batch {ev.batch_size}" if ev.batch_size else "") if x)
            self._log(LogLine(f"{ev.probe} {what}: {ev.message}"))
            changed.add("log")
        return changed

    def _on_StepMeasured(self, ev: StepMeasured) -> set[str]:
        p = self._ensure_probe(ev.probe)
        key = (ev.variant, ev.batch_size)
        if p.point_key != key or ev.step_index == 0:
            p.point_key, p.point_steps_ms = key, []
        p.variant, p.batch_size, p.phase = ev.variant, ev.batch_size, ev.phase
        p.point_steps_ms.append(ev.step_ms)
        return {"probe"}

    def _on_MeasurementRecorded(self, ev: MeasurementRecorded) -> set[str]:
        self.rows.append((ev.probe, dict(ev.row)))
        changed = {"table"}
        p = self.probe
        if p is not None and p.name == ev.probe:
            p.points_done += 1
            if p.point_steps_ms:
                p.point_seconds.append(sum(p.point_steps_ms) / 1000)
                if self._steps_per_point() is None:  # no settings: learn the plan from the last point
                    p.steps_per_point = len(p.point_steps_ms)
            p.point_key, p.point_steps_ms = None, []
            changed.add("probe")
        r = ev.row
        if r.get("fits") is False:
            self._log(LogLine(f"{r.get('variant')} batch {r.get('batch')}: out of memory"
                                    f"{' in ' + r['oom_phase'] if r.get('oom_phase') else ''}", "warning"))
            changed.add("log")
        return changed

    def _on_TelemetrySampled(self, ev: TelemetrySampled) -> set[str]:
        self.telemetry.add(ev.t, ev.values)
        return {"telemetry"}

    def _on_VerdictIssued(self, ev: VerdictIssued) -> set[str]:
        v = ev.verdict
        key = (v.get("code", ""), v.get("subject", "") or "")
        entry = self.verdicts.get(key)
        if entry is None:
            self.verdicts[key] = VerdictEntry(v, len(self.verdicts))
        else:
            entry.verdict, entry.updates = v, entry.updates + 1
        return {"verdicts"}

    def _on_ProbeFinished(self, ev: ProbeFinished) -> set[str]:
        self.probes_finished.append(ev)
        secs = f" in {ev.seconds:.1f} s" if ev.seconds is not None else ""
        if ev.ok:
            self._log(LogLine(f"probe {ev.probe} done{secs}"))
        else:
            self._log(LogLine(f"probe {ev.probe} stopped{secs}: {ev.error}",
                                    "info" if ev.error == "interrupted" else "error"))
        if self.probe is not None and self.probe.name == ev.probe:
            self.probe = None
        return {"probe", "log", "status"}

    def _on_LogMessage(self, ev: LogMessage) -> set[str]:
        self._log(LogLine(ev.text, ev.level))
        return {"log"}

    def _on_RunFinished(self, ev: RunFinished) -> set[str]:
        self.finished = ev
        self.finished_at = self.clock()
        self.probe = None
        if ev.interrupted:
            self._log(LogLine("interrupted: the run directory keeps everything measured so far", "warning"))
        if ev.error:
            self._log(LogLine(f"the run failed: {ev.error}", "error"))
        if ev.report_path:
            self._log(LogLine(f"report: {ev.report_path}"))
        return {"probe", "log", "status", "verdicts", "finished"}

    # -- reading -------------------------------------------------------------------------------
    def bottom_line(self, width: int) -> list:
        """The bottom line of what was received so far, `width` columns wide (the report's rows)."""
        from gcdoctor.types import Verdict
        from gcdoctor.report.bottom_line import bottom_line, title_from_settings
        verdicts = []
        for e in self.verdicts.values():
            try:
                verdicts.append(Verdict.from_dict(e.verdict))
            except (TypeError, ValueError, KeyError):
                continue
        problems = []
        f = self.finished
        if f is not None and f.interrupted:
            problems.append("the run was interrupted: the verdicts judge what was measured before it stopped")
        if f is not None and f.error:
            problems.append(f"the run ended with an error: {f.error}")
        problems += [f"probe {p.probe} crashed ({p.error}): its verdicts are missing" for p in self.probes_finished
                     if not p.ok and p.error != "interrupted"]
        return bottom_line(verdicts, title_from_settings(self.settings, self.environment), problems, width=width)

    def sorted_verdicts(self) -> list[VerdictEntry]:
        """The configuration's verdicts, then the experiments' (the probes' variants): each most
        severe first; among equals, in the order they first appeared."""
        return sorted(self.verdicts.values(),
                      key=lambda e: (e.verdict.get("scope") == "experiment",
                                     SEVERITY_ORDER.get(e.verdict.get("severity", ""), 9), e.order))

    def elapsed_s(self) -> float | None:
        if self.started_at is None:
            return None
        end = self.finished_at if self.finished_at is not None else self.clock()
        return end - self.started_at

    def probe_position(self) -> tuple[int, int] | None:
        """(index of the probe in progress, 1-based; number of probes planned)."""
        planned = self.settings.get("probes") or []
        if self.probe is None or self.probe.name not in planned:
            return None
        return planned.index(self.probe.name) + 1, len(planned)

    def device_key(self) -> str | None:
        """The device whose series the diagnose screen shows: the first one sampled."""
        keys = self.telemetry.device_keys()
        return keys[0] if keys else None

    def memory_total_bytes(self, key: str | None) -> float | None:
        if key is not None:
            total = self.telemetry.latest(f"{key}.mem_total_bytes")
            if total:
                return total
        total = self.environment.get("total_memory_bytes")
        return float(total) if total else None

    def pcie_peak_gbs(self, key: str | None = None) -> float | None:
        peaks = self.environment.get("pcie_link_peak_gbs_by_device") or {}
        if key is not None and peaks.get(key):
            return float(peaks[key])
        peak = self.environment.get("pcie_peak_gbs")
        return float(peak) if peak else None
