"""The background telemetry sampler: reads every source at a fixed rate on the step clock.

Timestamps are `time.monotonic()`, the clock the session uses for step boundaries, so a
step's telemetry is `summarize(step_start, step_end)`. A sample stamped t describes the time
just before t (counter rates since the previous sample, NVML utilisation over its own past
window), so a window takes the samples with t0 < t <= t1: adjacent steps never share one.

Data are kept in a ring buffer of `buffer_seconds`; pass `stream_path` to also append every
sample to a CSV file as it is taken, so an interrupted run keeps the full series.

Cost (issue 4): each tick only takes the clocks and each source's `capture()` (on NVIDIA, the
one field-values call for the PCIe byte counters and instant power, whose bytes are copied, and
the slow calls on their ticks). Decoding, unwrapping, storing, streaming and `on_sample` run
once per `batch_s` (1 s) for all the ticks since: a Python thread woken from sleep runs with cold
caches, and the same work cost several times more done tick by tick than in one warm loop.
Readers (`summarize`, `latest`, `samples`, ...) first process what is pending, in their own
thread, so they never see stale data; that CPU is counted in `overhead_cpu_pct` too. `on_sample`
(the live dashboards) therefore sees the samples up to `batch_s` late, in order.
"""
from __future__ import annotations

import bisect
import csv
import io
import math
import threading
import time
from array import array
from collections import deque
from pathlib import Path
from typing import Any, Callable, Iterable

from gcdoctor.facts.telemetry import SeriesSummary, TelemetryDevice, TelemetryFacts
from gcdoctor.telemetry.base import (
    DEVICE_SERIES, HOST_SERIES, Source, SourceUnavailable, UnavailableSource, visible_device_map,
)

# Seconds of ticks processed together: how late on_sample (the live dashboards) may see a sample.
BATCH_S = 1.0

OnSample = Callable[[float, dict[str, "float | None"]], None]
NAN = float("nan")


class TelemetrySampler:
    """Samples `sources` every 1/rate_hz seconds in a daemon thread.

    on_sample(t, values) runs in the sampler thread after each sample; it must be quick
    (the session forwards it to the event bus). An exception in it is recorded and the
    callback is dropped: a front end must never stop a measurement.
    """

    def __init__(self, sources: Iterable[Source], rate_hz: float = 20.0, on_sample: OnSample | None = None,
                 buffer_seconds: float = 3600, clock: Callable[[], float] = time.monotonic,
                 wall_clock: Callable[[], float] = time.time, stream_path: str | Path | None = None,
                 batch_s: float = BATCH_S) -> None:
        if rate_hz <= 0:
            raise ValueError("rate_hz must be positive")
        self.sources = list(sources)
        self.rate_hz = float(rate_hz)
        self.on_sample = on_sample
        self._clock, self._wall = clock, wall_clock
        self.series: list[str] = []
        self._captures = [src.capture for src in self.sources]
        for src in self.sources:
            self.series += [s for s in src.series if s not in self.series]
        self._capacity = max(1, int(buffer_seconds * rate_hz))
        self._t = array("d")
        self._wall_t = array("d")
        self._cols = {s: array("d") for s in self.series}
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.samples_taken = 0
        self.missed_ticks = 0
        self.read_errors: dict[str, str] = {}
        self.callback_error: str | None = None
        self.thread_cpu_s = 0.0  # CPU time of the sampler thread (on_sample included)
        self.reader_cpu_s = 0.0  # CPU other threads spent processing pending ticks for a reader
        self._poller_cpu_s = 0.0
        self._pending: deque = deque()  # (t, wall, captures) taken but not yet processed
        self._process_lock = threading.Lock()  # one thread decodes at a time, in tick order
        self._last_tick_t: float | None = None
        self._ticks = 0
        self.batch = max(1, round(batch_s * self.rate_hz))  # ticks processed together
        self._static: dict[str, Any] = {}
        for src in self.sources:
            try:
                self._static.update(src.static())
            except Exception as exc:  # noqa: BLE001
                self.read_errors[src.name] = f"static(): {exc}"
        self._first_t: float | None = None
        self._last_t: float | None = None
        self.path: str | None = None
        self._stream_path = Path(stream_path) if stream_path else None
        self._stream: Any = None
        self._stream_writer: Any = None
        self._stream_flushed = 0.0

    # -- sampling ----------------------------------------------------------------------------
    def sample_once(self) -> tuple[float, dict[str, float | None]]:
        """Read every source now, store the sample, call on_sample. Returns (t, values)."""
        self._capture()
        self._process_pending()
        with self._lock:
            t = self._t[-1]
            return t, {s: (None if math.isnan(c[-1]) else c[-1]) for s, c in self._cols.items()}

    def tick(self) -> None:
        """One tick as the sampler thread takes it: capture now; process the pending ticks when a
        batch is complete (and at the first tick, so a live view starts at once)."""
        self._capture()
        if self._ticks % self.batch == 0:
            self._process_pending()
        self._ticks += 1

    def _capture(self) -> None:
        """The tick itself: the clocks and each source's capture(), queued for processing."""
        t = self._clock()
        caps = []
        for capture in self._captures:
            try:
                caps.append(capture())
            except Exception as exc:  # noqa: BLE001 - processed as a failed read
                caps.append(exc)
        self._pending.append((t, self._wall(), caps))
        self._last_tick_t = t

    def _process_pending(self) -> None:
        """Decode and store every pending tick, oldest first (any thread; one at a time)."""
        with self._process_lock:
            while self._pending:
                t, wall, caps = self._pending.popleft()
                self._process(t, wall, caps)

    def _process(self, t: float, wall: float, caps: list) -> None:
        values: dict[str, float | None] = dict.fromkeys(self.series)
        for src, cap in zip(self.sources, caps):
            if not src.series:
                continue
            try:
                if isinstance(cap, Exception):
                    raise cap
                got = cap if isinstance(cap, dict) else src.read(cap)
            except Exception as exc:  # noqa: BLE001 - a failing source gives missing samples
                self.read_errors[src.name] = f"{type(exc).__name__}: {exc}"
                continue
            for k, v in got.items():
                if k in values:
                    values[k] = None if v is None or (isinstance(v, float) and math.isnan(v)) else float(v)
        self._store(t, wall, values)
        if self.on_sample is not None:
            try:
                self.on_sample(t, values)
            except Exception as exc:  # noqa: BLE001
                self.callback_error = f"{type(exc).__name__}: {exc}"
                self.on_sample = None

    def _catch_up(self) -> None:
        """Process pending ticks for a reader; CPU spent outside the sampler thread is counted."""
        if not self._pending:
            return
        if threading.current_thread() is self._thread:
            self._process_pending()
            return
        c0 = time.thread_time()
        self._process_pending()
        self.reader_cpu_s += time.thread_time() - c0

    def _store(self, t: float, wall: float, values: dict[str, float | None]) -> None:
        with self._lock:
            self._t.append(t)
            self._wall_t.append(wall)
            for s, col in self._cols.items():
                v = values[s]
                col.append(NAN if v is None else v)
            self.samples_taken += 1
            if self._first_t is None:
                self._first_t = t
            self._last_t = t
            excess = len(self._t) - self._capacity
            if excess >= max(1, self._capacity // 8):  # trim in chunks: amortised O(1) per sample
                for a in (self._t, self._wall_t, *self._cols.values()):
                    del a[:excess]
        if self._stream_writer is not None:
            self._stream_writer.writerow(_csv_row(t, wall, [values[s] for s in self.series]))
            if t - self._stream_flushed >= 1.0:
                self._stream.flush()
                self._stream_flushed = t

    def _run(self) -> None:
        period = 1.0 / self.rate_hz
        next_t = self._clock()
        base, cpu0 = self.thread_cpu_s, time.thread_time()
        while not self._stop.is_set():
            self.tick()
            self.thread_cpu_s = base + time.thread_time() - cpu0
            next_t += period
            now = self._clock()
            if now > next_t:  # the sample overran: skip the ticks we missed, keep the grid
                missed = int((now - next_t) / period) + 1
                self.missed_ticks += missed
                next_t += missed * period
            # time.sleep, not Event.wait: a timed wait on a lock costs more CPU per wake-up; stop()
            # waits at most one period for the loop to notice
            time.sleep(next_t - now)

    def prepare(self) -> None:
        """Tell the sources the rate and restart their baselines (start() does this)."""
        for src in self.sources:
            try:
                src.set_rate_hz(self.rate_hz)
                src.reset()
            except Exception as exc:  # noqa: BLE001
                self.read_errors[src.name] = f"reset(): {exc}"
        self._ticks = 0

    def start(self) -> "TelemetrySampler":
        if self._thread is not None:
            return self
        if self._stream_path is not None:
            self._stream_path.parent.mkdir(parents=True, exist_ok=True)
            self._stream = open(self._stream_path, "w", newline="")  # noqa: SIM115 - closed in stop()
            self._stream_writer = csv.writer(self._stream)
            self._stream_writer.writerow(["t_monotonic_s", "wall_time_s", *self.series])
            self.path = str(self._stream_path)
        self.prepare()
        self._stop.clear()
        self._thread = threading.Thread(target=self._run, name="gcdoctor-telemetry", daemon=True)
        self._thread.start()
        return self

    def stop(self, close_sources: bool = True) -> None:
        """Stop sampling (data stay readable); by default also close the sources and their pollers."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5.0)
            self._thread = None
        self._catch_up()
        if self._stream is not None:
            self._stream.close()
            self._stream = self._stream_writer = None
        if close_sources:
            self._poller_cpu_s = self.poller_cpu_s()
            for src in self.sources:
                try:
                    self._static.update(src.static())  # final link state, counter diagnostics
                except Exception:  # noqa: BLE001
                    pass
                try:
                    src.close()
                except Exception:  # noqa: BLE001
                    pass

    def poller_cpu_s(self) -> float:
        """CPU time of the sources' poller threads (PCIe counters, mthreads-gmi)."""
        total = 0.0
        for src in self.sources:
            try:
                total += src.cpu_seconds()
            except Exception:  # noqa: BLE001
                pass
        return max(total, self._poller_cpu_s)

    def overhead_cpu_pct(self) -> float | None:
        """CPU used by the sampler and its pollers, as % of one core over the sampled time."""
        with self._lock:
            first, last = self._first_t, self._last_t
        if first is None or last is None or last <= first:
            return None
        return 100.0 * (self.thread_cpu_s + self.reader_cpu_s + self.poller_cpu_s()) / (last - first)

    @property
    def running(self) -> bool:
        return self._thread is not None

    def __enter__(self) -> "TelemetrySampler":
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # -- reading back ------------------------------------------------------------------------
    def summarize(self, t0: float, t1: float, covering: bool = True) -> dict[str, SeriesSummary]:
        """Mean, min, max and count of every measured series over the samples with t0 < t <= t1.

        A window shorter than the sampling period may hold no sample. With `covering` (the
        default) it then takes the first sample after t1: a sample describes the period just
        before its timestamp, so that one covers the window (waiting up to two periods for it if
        the sampler runs). Without `covering`, or if no such sample comes, a series has n == 0 and
        None statistics, never zeros.
        """
        if covering:
            self._wait_for_sample_after(t1)
        self._catch_up()
        with self._lock:
            lo = bisect.bisect_right(self._t, t0)
            hi = bisect.bisect_right(self._t, t1)
            if covering and hi == lo and hi < len(self._t):
                hi = lo + 1
            out = {}
            for s, col in self._cols.items():
                vals = [v for v in col[lo:hi] if not math.isnan(v)]
                if vals:
                    out[s] = SeriesSummary(mean=sum(vals) / len(vals), min=min(vals), max=max(vals), n=len(vals))
                else:
                    out[s] = SeriesSummary()
        return out

    def _wait_for_sample_after(self, t1: float) -> None:
        thread = self._thread
        if thread is None or not thread.is_alive():
            return
        deadline = time.monotonic() + 2.0 / self.rate_hz
        while time.monotonic() < deadline:
            last = self._last_tick_t
            if last is not None and last > t1:
                return
            time.sleep(0.25 / self.rate_hz)

    def bitwise_or(self, series: str, t0: float, t1: float) -> int | None:
        """OR of an integer bitmask series (throttle reasons) over t0 < t <= t1; None if no sample."""
        self._catch_up()
        with self._lock:
            col = self._cols.get(series)
            if col is None:
                return None
            lo, hi = bisect.bisect_right(self._t, t0), bisect.bisect_right(self._t, t1)
            vals = [int(v) for v in col[lo:hi] if not math.isnan(v)]
        if not vals:
            return None
        out = 0
        for v in vals:
            out |= v
        return out

    def samples(self) -> dict[str, list]:
        """The buffered data as columns: 't', 'wall', then every series (None where missing)."""
        self._catch_up()
        with self._lock:
            out: dict[str, list] = {"t": list(self._t), "wall": list(self._wall_t)}
            for s, col in self._cols.items():
                out[s] = [None if math.isnan(v) else v for v in col]
        return out

    def latest(self) -> tuple[float, dict[str, float | None]] | None:
        """The most recent sample, or None before the first."""
        self._catch_up()
        with self._lock:
            if not self._t:
                return None
            return self._t[-1], {s: (None if math.isnan(c[-1]) else c[-1]) for s, c in self._cols.items()}

    def write_csv(self, path: str | Path) -> str:
        """One row per buffered sample: t (monotonic s), wall time (unix s), every series.

        Missing values are empty cells. Returns the path written.
        """
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        data = self.samples()
        buf = io.StringIO(newline="")
        w = csv.writer(buf)
        w.writerow(["t_monotonic_s", "wall_time_s", *self.series])
        for i, t in enumerate(data["t"]):
            w.writerow(_csv_row(t, data["wall"][i], [data[s][i] for s in self.series]))
        from gcdoctor.atomic import atomic_write_text
        atomic_write_text(path, buf.getvalue())
        self.path = str(path)
        return self.path

    def facts(self) -> TelemetryFacts:
        """What was measured, what was not and why, and the static description of the devices."""
        unavailable: dict[str, str] = {}
        notes: list[str] = []
        names: list[str] = []
        self._catch_up()
        for src in self.sources:
            unavailable.update({k: v for k, v in src.unavailable.items() if k not in self.series})
            notes += [n for n in getattr(src, "notes", []) if n not in notes]
            if not isinstance(src, UnavailableSource):
                names.append(src.name)
        with self._lock:
            n = self.samples_taken
            first, last = self._first_t, self._last_t
        duration = (last - first) if (first is not None and last is not None and n > 1) else None
        devices = devices_from_static(self._static)
        if self.missed_ticks:
            notes.append(f"{self.missed_ticks} sampling ticks were skipped: the sampler thread ran late (another "
                         "thread held the GIL, or no CPU was free); PCIe rates over such gaps are missing")
        if self.callback_error:
            notes.append(f"on_sample callback failed and was detached: {self.callback_error}")
        return TelemetryFacts(
            source="+".join(names),
            rate_hz=self.rate_hz,
            series=list(self.series),
            unavailable=unavailable,
            static={k: v for k, v in self._static.items() if isinstance(v, (int, float, str)) or v is None},
            samples=n,
            path=self.path,
            sources=names,
            devices=devices,
            pcie_link_peak_gbs=devices[0].pcie_link_peak_gbs if devices else None,
            duration_s=duration,
            achieved_rate_hz=(n - 1) / duration if duration else None,
            missed_ticks=self.missed_ticks,
            read_errors=dict(self.read_errors),
            notes=notes,
            overhead_cpu_pct=self.overhead_cpu_pct(),
        )

    def processes(self) -> list[dict[str, Any]]:
        """Processes on the sampled devices, from every source that can list them."""
        out: list[dict[str, Any]] = []
        for src in self.sources:
            try:
                out += src.processes()
            except NotImplementedError:
                continue
        return out


def _csv_row(t: float, wall: float, values: list[float | None]) -> list[str]:
    return [f"{t:.6f}", f"{wall:.6f}", *("" if v is None else repr(v) for v in values)]


_DEVICE_FIELDS = {f for f in TelemetryDevice.__dataclass_fields__ if f != "key"}


def devices_from_static(static: dict[str, Any]) -> list[TelemetryDevice]:
    """TelemetryDevice records from the flat 'gpuN.field' static keys, ordered by N."""
    by_key: dict[str, dict[str, Any]] = {}
    for k, v in static.items():
        prefix, _, name = k.partition(".")
        if prefix.startswith("gpu") and prefix[3:].isdigit() and name in _DEVICE_FIELDS:
            by_key.setdefault(prefix, {})[name] = v
    return [TelemetryDevice(key=k, **fields)
            for k, fields in sorted(by_key.items(), key=lambda kv: int(kv[0][3:]))]


def open_sources(device_kind: str, device_index: int | None = 0, include_host: bool = True,
                 pcie_poll_hz: float | None = None, pcie_mode: str = "auto",
                 slow_hz: float | None = 5.0) -> list[Source]:
    """The telemetry sources for a backend, each either open or an UnavailableSource with the reason.

    pcie_poll_hz: None reads NVIDIA's PCIe byte counters in the sampler's tick when its rate
    allows (else a 50 Hz poller thread); a number forces a poller thread at that rate.
    slow_hz: rate of the slow series (NVML utilisation, memory, SM clock, throttle reasons; all
    of psutil), read every round(rate/slow_hz)-th sample and held in between; None: every sample.

    cuda: NVML. musa: pymtml if importable and initialisable, else the mthreads-gmi CLI.
    Always psutil for the host (unless include_host=False). device_index=None: every device.
    """
    sources: list[Source] = []
    dev_keys = _expected_keys(device_kind, device_index)
    missing = [f"{k}.{s}" for k in dev_keys for s in DEVICE_SERIES]
    if device_kind == "cuda":
        from gcdoctor.telemetry.nvml import NvmlSource  # noqa: PLC0415

        try:
            sources.append(NvmlSource(device_index, pcie_poll_hz=pcie_poll_hz, pcie_mode=pcie_mode,
                                      slow_hz=slow_hz))
        except SourceUnavailable as exc:
            sources.append(UnavailableSource("nvml", str(exc), missing))
    elif device_kind == "musa":
        from gcdoctor.telemetry.mthreads import MthreadsGmiSource, PymtmlSource  # noqa: PLC0415

        reasons = []
        for cls in (PymtmlSource, MthreadsGmiSource):
            try:
                sources.append(cls(device_index))
                break
            except SourceUnavailable as exc:
                reasons.append(f"{cls.name}: {exc}")
        else:
            sources.append(UnavailableSource("musa", "; ".join(reasons), missing))
    if include_host:
        from gcdoctor.telemetry.host import HostSource  # noqa: PLC0415

        try:
            sources.append(HostSource(slow_hz=slow_hz))
        except SourceUnavailable as exc:
            sources.append(UnavailableSource("psutil", str(exc), HOST_SERIES))
    return sources


def _expected_keys(device_kind: str, device_index: int | None) -> list[str]:
    """Device keys the series would have had, to name what is missing when a source fails."""
    env = {"cuda": "CUDA_VISIBLE_DEVICES", "musa": "MUSA_VISIBLE_DEVICES"}.get(device_kind)
    if env is None:
        return []
    if device_index is not None:
        return [f"gpu{device_index}"]
    return [k for k, _ in visible_device_map(env, None, 1)] or ["gpu0"]
