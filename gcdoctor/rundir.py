"""The run directory: the unit of output, written as the run goes.

    config.json       the RunConfig
    facts.json        everything measured so far (rewritten atomically after each measurement)
    events.jsonl      the event stream, replayable into the TUI or the console
    telemetry.csv     the full telemetry series
    traces/*.json.gz  profiler traces (open in Perfetto: ui.perfetto.dev)
    report.{md,json,html}
"""
from __future__ import annotations

import json
import threading
import time
from datetime import datetime
from pathlib import Path
from typing import Any

from gcdoctor.errors import UserError
from gcdoctor.events import TelemetrySampled, event_to_json


def default_run_dir(command: str, model: str | None) -> Path:
    stamp = datetime.now().strftime("%Y%m%d-%H%M%S")
    return Path("gcdoctor-runs") / f"{stamp}-{command}-{model or 'run'}"


class RunDirectory:
    def __init__(self, path: str | Path, exist_ok: bool = True) -> None:
        self.path = Path(path)
        try:
            self.path.mkdir(parents=True, exist_ok=exist_ok)
            (self.path / "traces").mkdir(exist_ok=True)
        except OSError as exc:
            raise UserError(f"--out {path}: cannot create the run directory ({exc.strerror})") from None
        self._events = open(self.path / "events.jsonl", "a", buffering=1 << 16)
        self._lock = threading.Lock()
        self._last_flush = time.monotonic()

    def file(self, name: str) -> Path:
        return self.path / name

    def write_json(self, name: str, data: Any) -> Path:
        p = self.path / name
        tmp = p.with_suffix(p.suffix + ".tmp")
        tmp.write_text(json.dumps(data, indent=1, default=str))
        tmp.replace(p)
        return p

    def on_event(self, event: Any) -> None:
        """Bus subscriber: append every event; flush at once except for telemetry samples."""
        line = event_to_json(event)
        with self._lock:
            if self._events.closed:
                return
            self._events.write(line + "\n")
            now = time.monotonic()
            if not isinstance(event, TelemetrySampled) or now - self._last_flush > 1.0:
                self._events.flush()
                self._last_flush = now

    def close(self) -> None:
        with self._lock:
            if not self._events.closed:
                self._events.close()
