"""Plain console front end (--no-tui, CI, logs, ssh): prints the session's events as they come."""
from __future__ import annotations

import shutil
import sys
import textwrap
import threading
import time
from typing import Any, TextIO

from gcdoctor.report.format import term_escape
from gcdoctor.types import SEVERITIES
from gcdoctor.run.events import (LogMessage, MeasurementRecorded, ProbeFinished, ProbeStarted, Progress, RunFinished,
                             RunStarted, StepMeasured, VerdictIssued)

SEV = {s.name: s.console for s in SEVERITIES}


class ConsolePrinter:
    """Bus subscriber. Steps update one progress line on a terminal; everything else is a line."""

    def __init__(self, stream: TextIO | None = None, verbose: bool = False) -> None:
        self.out = stream or sys.stdout
        self.tty = hasattr(self.out, "isatty") and self.out.isatty()
        self.verbose = verbose
        self._lock = threading.Lock()
        self._t0 = time.monotonic()
        self._progress_shown = False
        # a line a person reads fits the terminal: its width on one, 80 columns in a log or a pipe
        self.width = shutil.get_terminal_size((80, 24)).columns if self.tty else 80

    def _line(self, text: str) -> None:
        if self._progress_shown:
            self.out.write("\r\033[K")
            self._progress_shown = False
        stamp = f"[{time.monotonic() - self._t0:6.1f}s] "
        body = term_escape(text)
        lead = len(body) - len(body.lstrip(" "))
        lines = textwrap.wrap(body, max(self.width - len(stamp), 30), subsequent_indent=" " * (lead + 4),
                              break_long_words=False, break_on_hyphens=False, drop_whitespace=True) or [""]
        self.out.write(stamp + lines[0] + "\n" + "".join(" " * len(stamp) + ln + "\n" for ln in lines[1:]))
        self.out.flush()

    def __call__(self, ev: Any) -> None:
        with self._lock:
            if isinstance(ev, RunStarted):
                s = ev.settings
                env = ev.environment
                self._line(f"gcdoctor {ev.command}: {s.get('model')} ({s.get('layers')} layers, "
                           f"{(s.get('params') or 0) / 1e9:.2f} B params), seq {s.get('seq_len')}, {s.get('dtype')}, "
                           f"on {env.get('device_name')} [{env.get('device_kind')}] -> {ev.run_dir}")
            elif isinstance(ev, ProbeStarted):
                self._line(f"probe {ev.probe}: {ev.description}")
            elif isinstance(ev, Progress) and ev.message:
                what = " ".join(x for x in (ev.probe, ev.variant, f"batch {ev.batch_size}"
                                            if ev.batch_size is not None else "") if x)
                self._line(f"  {what}: {ev.message}")
            elif isinstance(ev, StepMeasured):
                if self.tty:
                    self.out.write("\r\033[K" + term_escape(f"  {ev.probe} {ev.variant} b={ev.batch_size} {ev.phase} step "
                                                            f"{ev.step_index}: {ev.step_ms:.1f} ms"))
                    self.out.flush()
                    self._progress_shown = True
                elif self.verbose:
                    self._line(f"  {ev.variant} b={ev.batch_size} {ev.phase} {ev.step_index}: {ev.step_ms:.1f} ms")
            elif isinstance(ev, MeasurementRecorded):
                r = ev.row
                if r.get("fits", True):
                    rest = ", ".join(f"{k} {v}" for k, v in r.items()
                                     if k not in ("variant", "batch", "fits", "oom_phase", "timed_once")
                                     and v is not None)
                    if r.get("timed_once"):
                        rest += f", timed once ({r['timed_once']})"
                    self._line(f"  {r.get('variant')} batch {r.get('batch')}: {rest}")
                else:
                    self._line(f"  {r.get('variant')} batch {r.get('batch')}: out of memory in {r.get('oom_phase')}")
            elif isinstance(ev, VerdictIssued):
                v = ev.verdict
                self._line(f"[{SEV.get(v['severity'], '  ')}] {v['code']} {v['headline']}")
            elif isinstance(ev, ProbeFinished):
                state = "done" if ev.ok else f"stopped ({ev.error})"
                self._line(f"probe {ev.probe} {state} in {ev.seconds or 0:.1f} s")
            elif isinstance(ev, LogMessage):
                if ev.level != "info" or self.verbose:
                    self._line(f"{ev.level}: {ev.text}")
                else:
                    self._line(ev.text)
            elif isinstance(ev, RunFinished):
                if ev.interrupted:
                    self._line("interrupted: the run directory keeps everything measured so far")
