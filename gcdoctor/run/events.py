"""The session's event stream: one bus that the TUI, the console and the run directory follow.

Events are plain dataclasses that serialise to one JSON line each (`events.jsonl` in the run
directory), so a recorded stream can be replayed into any front end. No torch, no Textual.
"""
from __future__ import annotations

import json
import os
import re
import threading
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable

import msgspec

from gcdoctor.facts.serde import from_dict, to_dict
from gcdoctor.facts.sweep import Measurement


@dataclass
class RunStarted:
    run_dir: str
    command: str
    settings: dict[str, Any] = field(default_factory=dict)  # model, seq_len, dtype, probes ...
    environment: dict[str, Any] = field(default_factory=dict)
    startup_s: float | None = None  # from the process's start to this event (imports, device set-up)


@dataclass
class ProbeStarted:
    probe: str
    description: str = ""
    total_units: int | None = None  # planned measurement units (variants x batches), if known


@dataclass
class Progress:
    """A probe moved on: which variant/batch it is at and how much of its plan is done."""

    probe: str
    variant: str = ""
    batch_size: int | None = None
    done_units: int = 0
    total_units: int | None = None
    message: str = ""


@dataclass
class StepMeasured:
    probe: str
    variant: str
    batch_size: int
    step_index: int
    step_ms: float
    phase: str = "measure"  # warmup | measure | search | profile
    loss: float | None = None
    peak_allocated_bytes: int | None = None


@dataclass
class MeasurementRecorded:
    """A finished row of a probe's table (what the TUI's measurement table shows)."""

    probe: str
    row: dict[str, Any] = field(default_factory=dict)


@dataclass
class TelemetrySampled:
    t: float  # time.monotonic() seconds, the clock of step boundaries
    values: dict[str, float | None] = field(default_factory=dict)


@dataclass
class VerdictIssued:
    verdict: dict[str, Any]  # Verdict.to_dict()


@dataclass
class ProbeFinished:
    probe: str
    ok: bool = True
    error: str | None = None
    seconds: float | None = None


@dataclass
class PhaseTimed:
    """Seconds one phase of a probe took that no other event times: building a model, analysing a
    trace (bench/diagnose_phases.py adds these up with the steps' own times)."""

    probe: str
    phase: str  # "model build" | "trace analysis"
    seconds: float
    detail: str = ""


@dataclass
class LogMessage:
    text: str
    level: str = "info"  # info | warning | error


@dataclass
class RunFinished:
    run_dir: str
    interrupted: bool = False
    error: str | None = None
    report_path: str | None = None
    verdict_counts: dict[str, int] = field(default_factory=dict)


EVENT_TYPES: dict[str, type] = {
    cls.__name__: cls
    for cls in (RunStarted, ProbeStarted, Progress, StepMeasured, MeasurementRecorded,
                TelemetrySampled, VerdictIssued, ProbeFinished, LogMessage, RunFinished, PhaseTimed)
}


_encode = msgspec.json.Encoder().encode


def process_age_s() -> float | None:
    """Seconds since this process started (Linux /proc), None where unknown."""
    try:
        with open("/proc/self/stat", "rb") as fh:
            start_ticks = int(fh.read().rsplit(b")", 1)[1].split()[19])
        with open("/proc/uptime", "rb") as fh:
            uptime = float(fh.read().split()[0])
        return round(uptime - start_ticks / os.sysconf("SC_CLK_TCK"), 2)
    except (OSError, ValueError, IndexError, AttributeError):
        return None


def event_to_json(event: Any, wall: float | None = None) -> str:
    """One JSON line: {"type": ..., "wall": unix seconds, **fields}."""
    wall = time.time() if wall is None else wall
    if type(event) is TelemetrySampled:
        # the hot path (20 a second, written from the sampler thread): msgspec encodes the flat
        # dict in ~2 us where the generic dataclass walk and json.dumps take ~17 us
        # (bench/event_encode.py, docs/benchmarks.md)
        return _encode({"type": "TelemetrySampled", "wall": wall, "t": event.t, "values": event.values}).decode()
    return json.dumps({"type": type(event).__name__, "wall": wall, **to_dict(event)})


def event_from_json(line: str) -> Any:
    """An event from one events.jsonl line; ValueError (one line, naming the field) if it is not one."""
    data = json.loads(line)
    if not isinstance(data, dict):
        raise ValueError("an event line must be a JSON object")
    name = data.pop("type", None)
    cls = EVENT_TYPES.get(name) if isinstance(name, str) else None
    if cls is None:
        raise ValueError(f"unknown event type {name!r}")
    data.pop("wall", None)
    return from_dict(cls, data)


def read_events(path: str) -> Iterable[Any]:
    """The events of an events.jsonl. A line that does not decode (the last one of a killed run,
    cut short; one from a newer gcdoctor) is skipped: a recording is read as far as it goes."""
    with open(path, errors="replace") as fh:
        for line in fh:
            if line.strip():
                try:
                    yield event_from_json(line)
                except (ValueError, TypeError, RecursionError):
                    continue


class EventBus:
    """Fan-out of events to subscribers. Thread-safe: the telemetry sampler emits from its thread.

    A subscriber must be quick and must not raise; one that raises is reported once and dropped,
    so a broken front end can never stop a measurement.
    """

    def __init__(self) -> None:
        self._subscribers: list[Callable[[Any], None]] = []
        self._lock = threading.Lock()

    def subscribe(self, fn: Callable[[Any], None]) -> Callable[[Any], None]:
        with self._lock:
            self._subscribers.append(fn)
        return fn

    def unsubscribe(self, fn: Callable[[Any], None]) -> None:
        with self._lock:
            if fn in self._subscribers:
                self._subscribers.remove(fn)

    def emit(self, event: Any) -> None:
        with self._lock:
            subscribers = list(self._subscribers)
        for fn in subscribers:
            try:
                fn(event)
            except Exception as exc:  # noqa: BLE001 - a front end must not kill the run
                self.unsubscribe(fn)
                if not isinstance(event, LogMessage):
                    self.emit(LogMessage(f"a subscriber failed and was detached: {exc!r}", "warning"))


def _short_timed_once(note: str) -> str:
    """"4.2x gc's step" out of Measurement.timed_once's sentence (the console line's form)."""
    found = re.search(r" was (\S+x .+?)'s \(", note)
    return f"{found.group(1)}'s step" if found else "slow"


def measurement_row(m: Measurement) -> dict[str, Any]:
    """The compact row a MeasurementRecorded event carries (TUI table, console)."""
    gib = 1 / 2**30
    return {
        "variant": m.variant, "batch": m.batch_size, "fits": m.fits,
        "step_ms": None if m.step_ms_median is None else round(m.step_ms_median, 1),
        "peak_gib": None if m.peak_allocated_bytes is None else round(m.peak_allocated_bytes * gib, 2),
        "tokens_per_s": None if m.tokens_per_s is None else round(m.tokens_per_s),
        "mfu_pct": None if m.mfu is None else round(100 * m.mfu, 1),
        "oom_phase": m.oom_phase,
        "timed_once": None if m.timed_once is None else _short_timed_once(m.timed_once),
    }
