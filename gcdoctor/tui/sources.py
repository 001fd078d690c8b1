"""Where the dashboard's events come from: a live session, a recorded stream, or a followed run.

A source delivers events by calling `sink(event)` from any thread. The app decides how to
show them; the source decides how to stop. No Textual here.

- SessionSource: runs `Session.run()` (or the monitor's loop) in its own thread. Stopping sets
  the session's `stop_requested`; the session then writes the partial run directory and its
  report and emits RunFinished, and the thread ends.
- ReplaySource: a recorded list of events, delivered at once (tests, screenshots).
- FollowSource: tails `events.jsonl` of a run written by another process (`monitor --run`).
"""
from __future__ import annotations

import json
import threading
import time
from pathlib import Path
from typing import Any, Callable, Iterable

from gcdoctor.run.events import LogMessage, RunStarted, TelemetrySampled, event_from_json

Sink = Callable[[Any], None]


class Source:
    """Base: `start(sink, on_done)`, `request_stop()`, and whether stopping has to be waited for."""

    #: True when quitting must wait for the source to finish writing (a live session)
    waits_on_stop = False

    def __init__(self) -> None:
        self.done = threading.Event()
        self.error: BaseException | None = None

    def start(self, sink: Sink, on_done: Callable[[], None]) -> None:
        raise NotImplementedError

    def request_stop(self) -> None:
        pass

    def join(self, timeout: float | None = None) -> None:
        self.done.wait(timeout)


class SessionSource(Source):
    """Runs anything with `.bus`, `.stop_requested` and `.run()` (Session, MonitorSession) in a thread.

    A plain thread rather than a Textual worker so the front end can join it after the app
    has closed: the run directory must be complete before the process exits.
    """

    waits_on_stop = True

    def __init__(self, session: Any) -> None:
        super().__init__()
        self.session = session
        self.thread: threading.Thread | None = None
        self._sink: Sink | None = None

    def start(self, sink: Sink, on_done: Callable[[], None]) -> None:
        self._sink = sink
        self.session.bus.subscribe(sink)

        def work() -> None:
            try:
                self.session.run()
            except BaseException as exc:  # noqa: BLE001 - handed to the front end, re-raised after the app
                self.error = exc
            finally:
                self.done.set()
                on_done()

        self.thread = threading.Thread(target=work, name="gcdoctor-session", daemon=True)
        self.thread.start()

    def request_stop(self) -> None:
        self.session.stop_requested.set()

    def detach(self) -> None:
        if self._sink is not None:
            self.session.bus.unsubscribe(self._sink)

    def join(self, timeout: float | None = None) -> None:
        if self.thread is not None:
            self.thread.join(timeout)


class ReplaySource(Source):
    """Recorded events, delivered synchronously when the app starts."""

    def __init__(self, events: Iterable[Any]) -> None:
        super().__init__()
        self.events = list(events)

    def start(self, sink: Sink, on_done: Callable[[], None]) -> None:
        for ev in self.events:
            sink(ev)
        self.done.set()
        on_done()


class FollowSource(Source):
    """Tails a run directory's `events.jsonl` (written by diagnose or gcdoctor.watch in another process).

    `alerts` (a LiveAlerts) runs the telemetry-only rules on the followed telemetry and adds
    their warnings to the stream. Stops at `request_stop`, or after `seconds`.
    """

    def __init__(self, run_dir: str | Path, alerts: Any = None, poll_s: float = 0.25,
                 seconds: float | None = None, stop_at_finish: bool = False) -> None:
        super().__init__()
        self.path = Path(run_dir) / "events.jsonl"
        self.alerts = alerts
        self.poll_s = poll_s
        self.seconds = seconds
        self.stop_at_finish = stop_at_finish
        self._stop = threading.Event()
        self.thread: threading.Thread | None = None
        self.finished_seen = False

    def start(self, sink: Sink, on_done: Callable[[], None]) -> None:
        def work() -> None:
            try:
                self._follow(sink)
            except BaseException as exc:  # noqa: BLE001
                self.error = exc
            finally:
                self.done.set()
                on_done()

        self.thread = threading.Thread(target=work, name="gcdoctor-follow", daemon=True)
        self.thread.start()

    def run_here(self, sink: Sink) -> None:
        """Follow in the calling thread (the console front end)."""
        try:
            self._follow(sink)
        finally:
            self.done.set()

    def request_stop(self) -> None:
        self._stop.set()

    def join(self, timeout: float | None = None) -> None:
        if self.thread is not None:
            self.thread.join(timeout)

    def _follow(self, sink: Sink) -> None:
        t_end = None if self.seconds is None else time.monotonic() + self.seconds
        waiting_logged = False
        while not self.path.exists():
            if not waiting_logged:
                sink(LogMessage(f"waiting for {self.path} to appear"))
                waiting_logged = True
            if self._stop.wait(self.poll_s) or (t_end is not None and time.monotonic() >= t_end):
                return
        with open(self.path) as fh:
            partial = ""
            while True:
                line = fh.readline()
                if line:
                    partial += line
                    if not partial.endswith("\n"):
                        continue  # the writer is mid-line: wait for the rest
                    text, partial = partial, ""
                    if text.strip():
                        self._deliver(text, sink)
                    if self.finished_seen and self.stop_at_finish:
                        return
                    continue
                if self._stop.wait(self.poll_s) or (t_end is not None and time.monotonic() >= t_end):
                    return

    def _deliver(self, text: str, sink: Sink) -> None:
        try:
            ev = event_from_json(text)
        except (ValueError, KeyError, TypeError) as exc:
            sink(LogMessage(f"skipped an unreadable line of {self.path.name}: {exc}", "warning"))
            return
        if isinstance(ev, RunStarted) and self.alerts is not None:
            peak = ev.environment.get("pcie_peak_gbs")
            self.alerts.environment.pcie_peak_gbs = peak if isinstance(peak, (int, float)) else None
        sink(ev)
        if isinstance(ev, TelemetrySampled) and self.alerts is not None:
            for extra in self.alerts.feed(ev.t, ev.values):
                sink(extra)
        if type(ev).__name__ == "RunFinished":
            self.finished_seen = True


def check_run_dir(path: str | Path) -> Path:
    """The directory `monitor --run` follows; a clear error where it cannot be one."""
    from gcdoctor.errors import UserError

    p = Path(path)
    if not p.exists():
        raise UserError(f"--run {path}: no such directory")
    if not p.is_dir():
        raise UserError(f"--run {path}: not a directory (give the run directory, not a file in it)")
    events = p / "events.jsonl"
    if events.exists():
        try:
            with open(events) as fh:
                first = fh.readline()
            if first.strip():
                json.loads(first)
        except (OSError, ValueError) as exc:
            raise UserError(f"--run {path}: events.jsonl is not a gcdoctor event stream ({exc})") from None
    return p
