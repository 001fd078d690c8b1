"""`gcdoctor monitor`: live telemetry beside a training job in another process, and a record of it.

    gcdoctor monitor                    all GPUs, live dashboard, recorded to a run directory on exit
    gcdoctor monitor --gpu 1 --no-tui   one GPU, warnings printed to the console
    gcdoctor monitor --run DIR          follow a run directory written by diagnose / gcdoctor.watch

The recording is a run directory like diagnose's: telemetry.csv (every sample, streamed as it
is taken), events.jsonl, facts.json (telemetry facts and the 1 s windows the rules read) and
the report of the telemetry-only rules (GC040, GC041). Textual is imported only for the TUI.
"""
from __future__ import annotations

import os
import platform
import socket
import sys
import threading
import time
from datetime import datetime, timezone
from typing import TYPE_CHECKING, Any, Callable, TextIO

from gcdoctor.engine import evaluate
from gcdoctor.types import SEVERITY, Verdict
from gcdoctor.errors import UserError
from gcdoctor.run.events import EventBus, LogMessage, RunFinished, RunStarted, TelemetrySampled, VerdictIssued
from gcdoctor.facts import Environment, Facts, RunSettings
from gcdoctor.facts.monitor import MonitoredProcess, MonitorFacts
from gcdoctor.run.rundir import RunDirectory, default_run_dir
from gcdoctor.tui.alerts import LiveAlerts, live_rules

if TYPE_CHECKING:
    from gcdoctor.telemetry import TelemetrySampler

PROCESS_POLL_S = 2.0  # process lists change rarely; NVML's per-process query is not free


def open_monitor_sources(gpu: int | None) -> tuple[str, list, list[str]]:
    """(device kind, sources, reasons a device source did not open). Tries NVML, then MUSA, then host only."""
    from gcdoctor.telemetry import UnavailableSource, open_sources

    reasons: list[str] = []
    for kind in ("cuda", "musa"):
        sources = open_sources(kind, gpu, include_host=False)
        if any(not isinstance(s, UnavailableSource) for s in sources):
            return kind, sources + open_sources("cpu", None), reasons
        reasons += [f"{s.name}: {s.reason}" for s in sources if isinstance(s, UnavailableSource)]
    if gpu is not None:
        raise UserError(f"--gpu {gpu}: no GPU telemetry is available here ({'; '.join(reasons)})")
    return "cpu", open_sources("cpu", None), reasons


def _process_name(pid: int) -> str | None:
    try:
        import psutil
        return psutil.Process(pid).name()
    except Exception:  # noqa: BLE001 - gone, or another container's PID
        return None


class MonitorSession:
    """Samples the devices and the host, raises live warnings, records everything on exit.

    Shaped like Session for the front ends: `.bus`, `.stop_requested`, `.run()`, `.rundir`.
    """

    def __init__(self, gpu: int | None = None, rate_hz: float = 20.0, out: str | None = None,
                 seconds: float | None = None, bus: EventBus | None = None, sources: list | None = None,
                 device_kind: str | None = None, thresholds: dict[str, dict[str, float]] | None = None,
                 clock: Callable[[], float] = time.monotonic) -> None:
        if rate_hz <= 0 or rate_hz > 1000:
            raise UserError(f"--telemetry-hz {rate_hz:g}: use a rate between 0 and 1000 Hz")
        if seconds is not None and seconds <= 0:
            raise UserError(f"--seconds {seconds:g}: must be positive")
        self.bus = bus or EventBus()
        self.stop_requested = threading.Event()
        self.gpu, self.rate_hz, self.seconds, self.clock = gpu, rate_hz, seconds, clock
        self.reasons: list[str] = []
        if sources is None:
            device_kind, sources, self.reasons = open_monitor_sources(gpu)
        self.device_kind = device_kind or "cpu"
        self.sources = sources
        self.thresholds = thresholds
        self.rundir = RunDirectory(out or default_run_dir("monitor", None))
        self.processes_now: list[dict[str, Any]] = []  # replaced whole, read by the TUI thread
        self._seen: dict[tuple[str, int], MonitoredProcess] = {}
        self._current: set[tuple[str, int]] = set()  # (device, pid) at the last poll
        self.verdicts: list[Verdict] = []
        self.facts: Facts | None = None
        self.sampler: TelemetrySampler | None = None
        self.alerts: LiveAlerts | None = None
        self._t0: float | None = None

    # -- the loop ------------------------------------------------------------------------------
    def run(self) -> list[Verdict]:
        from gcdoctor.telemetry import TelemetrySampler

        self.bus.subscribe(self.rundir.on_event)
        sampler = TelemetrySampler(self.sources, rate_hz=self.rate_hz, on_sample=self._on_sample,
                                   stream_path=self.rundir.file("telemetry.csv"))
        self.sampler = sampler
        tel = sampler.facts()
        keys = [d.key for d in tel.devices]
        self.environment = self._environment(tel)
        self.alerts = LiveAlerts(devices=keys, device_kind=self.device_kind, keep_proc=False,
                                 overrides=self.thresholds, telemetry=tel, environment=self.environment)
        started = datetime.now(timezone.utc).isoformat(timespec="seconds")
        env = dict(self.environment.__dict__)
        env["device_names"] = {d.key: d.name or d.key for d in tel.devices}
        env["pcie_link_peak_gbs_by_device"] = {d.key: d.pcie_link_peak_gbs for d in tel.devices}
        if self.reasons:
            env["device_unavailable"] = "; ".join(self.reasons)
        self.bus.emit(RunStarted(str(self.rundir.path), "monitor", {
            "gpu": self.gpu, "rate_hz": self.rate_hz, "seconds": self.seconds, "devices": keys}, env))
        if self.reasons and not keys:
            self.bus.emit(LogMessage(f"no GPU telemetry: {'; '.join(self.reasons)}", "warning"))
        self._t0 = self.clock()
        interrupted = False
        sampler.start()
        try:
            next_poll = 0.0
            while not self.stop_requested.is_set():
                now = self.clock()
                if self.seconds is not None and now - self._t0 >= self.seconds:
                    break
                if now >= next_poll:
                    self._poll_processes(now - self._t0)
                    next_poll = now + PROCESS_POLL_S
                self.stop_requested.wait(0.1)
        except KeyboardInterrupt:
            interrupted = True
        finally:
            self._finish(started, interrupted)
        return self.verdicts

    def _on_sample(self, t: float, values: dict[str, float | None]) -> None:
        """Sampler thread: forward the sample, then any warning the recent windows raise."""
        self.bus.emit(TelemetrySampled(t, values))
        if self.alerts is not None:
            for ev in self.alerts.feed(t, values):
                self.bus.emit(ev)

    def _poll_processes(self, t_s: float) -> None:
        if self.sampler is None:
            return
        procs = []
        for p in self.sampler.processes():
            p = dict(p)
            p.setdefault("name", None)
            if p["name"] is None:
                p["name"] = _process_name(p["pid"])
            procs.append(p)
        current = set()
        for p in procs:
            key = (p["device"], p["pid"])
            current.add(key)
            rec = self._seen.get(key)
            used = None if p.get("used_memory_bytes") is None else int(p["used_memory_bytes"])
            if rec is None:
                rec = self._seen[key] = MonitoredProcess(p["device"], p["pid"], p["name"], used, t_s, t_s)
                mem = f", {used / 1e9:.1f} GB" if used else ""
                self.bus.emit(LogMessage(f"{p['device']}: pid {p['pid']} ({p['name'] or '?'}) is using the GPU{mem}"))
            rec.last_seen_s = t_s
            if used is not None and (rec.max_used_memory_bytes is None or used > rec.max_used_memory_bytes):
                rec.max_used_memory_bytes = used
        for device, pid in sorted(self._current - current):
            self.bus.emit(LogMessage(f"{device}: pid {pid} left the GPU"))
        self._current = current
        self.processes_now = procs

    # -- the record ----------------------------------------------------------------------------
    def _environment(self, tel: Any) -> Environment:
        from gcdoctor import __version__

        first = tel.devices[0] if tel.devices else None
        try:
            import psutil
            host_mem = psutil.virtual_memory().total
        except Exception:  # noqa: BLE001
            host_mem = None
        return Environment(
            device_kind=self.device_kind,
            device_name=(first.name or first.key) if first else "no GPU (host telemetry only)",
            device_count=len(tel.devices), total_memory_bytes=first.total_memory_bytes if first else None,
            driver=tel.static.get("driver") if isinstance(tel.static.get("driver"), str) else None,
            python=platform.python_version(), host=socket.gethostname(), cpu_count=os.cpu_count(),
            host_memory_bytes=host_mem, pcie_peak_gbs=first.pcie_link_peak_gbs if first else None,
            gcdoctor=__version__)

    def _finish(self, started: str, interrupted: bool) -> None:
        from gcdoctor.report import write_reports

        assert self.sampler is not None and self.alerts is not None
        self.sampler.stop()
        self.alerts.windower.flush()
        tel = self.sampler.facts()
        tel.path = "telemetry.csv"
        facts = Facts(environment=self.environment, telemetry=tel, settings=RunSettings(
            command="monitor", started_at=started, probes=[],
            finished_at=datetime.now(timezone.utc).isoformat(timespec="seconds"),
            wall_s=round(self.clock() - (self._t0 or self.clock()), 1), interrupted=interrupted))
        facts.monitor = MonitorFacts(device_kind=self.device_kind, devices=[d.key for d in tel.devices],
                                     window_s=self.alerts.windower.window_s,
                                     duration_s=tel.duration_s, windows=list(self.alerts.windows),
                                     processes=list(self._seen.values()))
        if self.reasons:
            facts.unavailable["monitor.devices"] = "; ".join(self.reasons)
        self.facts = facts
        facts.save(self.rundir.file("facts.json"))
        self.verdicts = evaluate(facts, rules=live_rules(), overrides=self.thresholds)
        for v in self.verdicts:
            if v.status != "inconclusive":
                self.bus.emit(VerdictIssued(v.to_dict()))
        report = write_reports(self.rundir.path, facts, self.verdicts)
        counts: dict[str, int] = {}
        for v in self.verdicts:
            counts[v.severity] = counts.get(v.severity, 0) + 1
        self.bus.emit(RunFinished(str(self.rundir.path), interrupted, None, str(report), counts))
        self.rundir.close()


class JsonLinesPrinter:
    """`monitor --no-tui --json`: every event but the telemetry samples, one JSON object a line
    (the format of events.jsonl), for a script to follow."""

    def __init__(self, stream: TextIO | None = None) -> None:
        self.out = stream or sys.stdout
        self._lock = threading.Lock()

    def __call__(self, ev: Any) -> None:
        from gcdoctor.run.events import TelemetrySampled, event_to_json
        if isinstance(ev, TelemetrySampled):
            return
        with self._lock:
            self.out.write(event_to_json(ev) + "\n")
            self.out.flush()


class MonitorPrinter:
    """Console front end of the monitor (--no-tui): warnings and process changes, one line each."""

    def __init__(self, stream: TextIO | None = None) -> None:
        self.out = stream or sys.stdout
        self._lock = threading.Lock()

    def _line(self, text: str) -> None:
        from gcdoctor.report.format import term_escape
        self.out.write(term_escape(text) + "\n")
        self.out.flush()

    def __call__(self, ev: Any) -> None:
        with self._lock:
            if isinstance(ev, RunStarted):
                names = ev.environment.get("device_names") or {}
                what = ", ".join(f"{k} {n}" for k, n in names.items()) or "no GPU (host telemetry only)"
                self._line(f"gcdoctor monitor: {what}; {ev.settings.get('rate_hz'):g} Hz; recording to {ev.run_dir}")
            elif isinstance(ev, VerdictIssued):
                v = ev.verdict
                mark = SEVERITY[v["severity"]].console if v.get("severity") in SEVERITY else "  "
                self._line(f"[{mark}] {v.get('code')} {v.get('headline')}")
            elif isinstance(ev, LogMessage):
                self._line(ev.text if ev.level == "info" else f"{ev.level}: {ev.text}")
            elif isinstance(ev, RunFinished):
                self._line(f"recorded to {ev.run_dir}; report: {ev.report_path}")


def _use_tui(args: Any) -> bool:
    return not getattr(args, "no_tui", False) and sys.stdout.isatty() and sys.stdin.isatty()


def run_monitor(args: Any) -> int:
    """The `gcdoctor monitor` command."""
    if getattr(args, "run", None):
        return _follow(args)
    session = MonitorSession(gpu=args.gpu, rate_hz=args.telemetry_hz, out=args.out, seconds=args.seconds)
    if _use_tui(args):
        from gcdoctor.tui.app import DashboardApp
        from gcdoctor.tui.sources import SessionSource

        source = SessionSource(session)
        app = DashboardApp(source, mode="monitor", monitor=session)
        try:
            app.run()
        finally:
            if not source.done.is_set():
                source.request_stop()
                source.join()
            source.detach()
        if source.error is not None:
            raise source.error
        print(f"recorded to {session.rundir.path}")
        return 0
    session.bus.subscribe(JsonLinesPrinter() if getattr(args, "json", False) else MonitorPrinter())
    try:
        session.run()
    except KeyboardInterrupt:  # a second Ctrl-C while writing: the record may be partial
        return 130
    return 0


def _follow(args: Any) -> int:
    """`monitor --run DIR`: show a run directory another process is writing, with live warnings."""
    from gcdoctor.tui.sources import FollowSource, check_run_dir

    run_dir = check_run_dir(args.run)
    alerts = LiveAlerts(keep_proc=True)
    if _use_tui(args):
        from gcdoctor.tui.app import DashboardApp

        source = FollowSource(run_dir, alerts=alerts, seconds=args.seconds)
        app = DashboardApp(source, mode="follow")
        try:
            app.run()
        finally:
            source.request_stop()
            source.join(2.0)
        return 0
    from gcdoctor.run.console import ConsolePrinter

    source = FollowSource(run_dir, alerts=alerts, seconds=args.seconds, stop_at_finish=True)
    printer = ConsolePrinter()
    try:
        source.run_here(printer)
    except KeyboardInterrupt:
        return 0
    return 0


__all__ = ["MonitorPrinter", "MonitorSession", "open_monitor_sources", "run_monitor"]
