"""The run directory: the unit of output, written as the run goes.

    config.json       the RunConfig
    facts.json        everything measured so far (rewritten atomically after each measurement)
    events.jsonl      the event stream, replayable into the TUI or the console
    telemetry.csv     the full telemetry series
    traces/VARIANT/HOST_PID.MS.pt.trace.json.gz
                      profiler traces, named as torch's tensorboard_trace_handler names them, with
                      the run's telemetry as counter tracks (open in ui.perfetto.dev)
    gcdoctor.log      what torch, Kineto and NCCL printed (kept off the console)
    error.log         the traceback of an unexpected exception, if one ended the run
    report.{md,json,html}

One run directory has one owner: the process that opened it holds a lock (`.gcdoctor.lock`)
until it closes it, and a second process gets a one-line refusal instead of interleaving its
events and telemetry with the first's.
"""
from __future__ import annotations

import json
import os
import re
import threading
import time
from datetime import datetime
from pathlib import Path
from typing import IO, Any

from gcdoctor.atomic import atomic_write_text
from gcdoctor.errors import RunDirectoryBusy, UserError
from gcdoctor.run.events import TelemetrySampled, event_to_json

try:
    import fcntl
except ImportError:  # pragma: no cover - not POSIX: no lock
    fcntl = None  # type: ignore[assignment]

LOCK_NAME = ".gcdoctor.lock"
ERROR_LOG = "error.log"

# the run directory most recently opened in this process: where an unexpected exception's
# traceback is kept (cli.main)
_current: "RunDirectory | None" = None


def current() -> "RunDirectory | None":
    return _current


def forget_current() -> None:
    global _current
    _current = None


def safe_name(text: str, limit: int = 80) -> str:
    """A file-name component from any text: letters, digits, '.', '_', '-', '+' and '=' kept,
    everything else (separators, quotes, control characters, spaces) as '_'; never '.' or '..'."""
    name = re.sub(r"[^A-Za-z0-9._+=-]", "_", text)[:limit].strip(".") or "_"
    return name


def default_run_dir(command: str, model: str | None) -> Path:
    """A new folder under ./gcdoctor-runs/, unique even for two runs started in the same second."""
    stamp = datetime.now().strftime("%Y%m%d-%H%M%S")
    base = Path("gcdoctor-runs") / safe_name(f"{stamp}-{command}-{Path(model).stem if model else 'run'}")
    path, n = base, 1
    while path.exists():
        n += 1
        path = base.with_name(f"{base.name}-{n}")
    return path


# what a gcdoctor run directory holds: --force empties only a folder that has some of these
RUN_MARKERS = (LOCK_NAME, "events.jsonl", "facts.json", "config.json", "gcdoctor.log", ERROR_LOG, "report.json",
               "report.md", "report.html", "telemetry.csv")


def live_owner(path: Path) -> str | None:
    """The pid (as written) of the gcdoctor process that holds `path`'s run lock now, else None.
    Never creates the lock file."""
    lock = Path(path) / LOCK_NAME
    if fcntl is None or not lock.is_file():
        return None
    try:
        with open(lock) as fh:
            try:
                fcntl.flock(fh.fileno(), fcntl.LOCK_SH | fcntl.LOCK_NB)
            except OSError:
                return fh.read().strip() or "?"
            fcntl.flock(fh.fileno(), fcntl.LOCK_UN)
    except OSError:
        return None
    return None


def is_run_dir(path: Path) -> bool:
    """Whether a folder looks like a gcdoctor run directory (or a distributed run's rank folders)."""
    p = Path(path)
    return any((p / m).exists() for m in RUN_MARKERS) or any(p.glob("rank-*/facts.json"))


def prepare_run_dir(path: str | Path, force: bool, flag: str = "--out") -> None:
    """Before a command writes a run directory: a non-empty one is refused (a second run would mix
    its events and traces with the first's), unless `force`, which empties it first. A directory
    in use by a live run is refused either way, and so is emptying a folder that is not a run
    directory (`--out . --force` must not wipe a working tree)."""
    import shutil
    path = Path(path)
    if not path.exists() and not path.is_symlink():
        return
    _check_target(path, flag)
    owner = live_owner(path)
    if owner is not None:
        raise RunDirectoryBusy(f"{flag} {path}: in use by another gcdoctor process (pid {owner}); "
                               f"choose another --out or wait for it to end")
    try:
        entries = [e for e in path.iterdir() if e.name != LOCK_NAME]
    except OSError as exc:
        raise UserError(f"{flag} {path}: cannot read the directory ({exc.strerror or exc})") from None
    if not entries:
        return
    if not force:
        raise UserError(f"{flag} {path}: not empty ({len(entries)} entries{', a finished run' if is_run_dir(path) else ''}"
                        f"); choose a new directory, or add --force to empty it first")
    if not is_run_dir(path):
        raise UserError(f"{flag} {path}: --force empties only a gcdoctor run directory, and this folder is not one "
                        f"(no facts.json, events.jsonl or report); choose a new directory")
    try:
        for e in entries:
            if e.is_dir() and not e.is_symlink():
                shutil.rmtree(e)
            else:
                e.unlink()
    except OSError as exc:
        raise UserError(f"{flag} {path}: --force could not empty it ({exc.strerror or exc})") from None


def _check_target(path: Path, flag: str) -> None:
    if path.exists() and not path.is_dir():
        raise UserError(f"{flag} {path}: exists and is not a directory")


class RunDirectory:
    def __init__(self, path: str | Path, exist_ok: bool = True, events: bool = True, flag: str = "--out") -> None:
        global _current
        self.path = Path(path)
        _check_target(self.path, flag)
        try:
            self.path.mkdir(parents=True, exist_ok=exist_ok)
            (self.path / "traces").mkdir(exist_ok=True)
            self._lock_fh: IO[str] | None = self._acquire(flag)
            self._events = open(self.path / "events.jsonl", "a", buffering=1 << 16) if events else None
        except OSError as exc:
            raise UserError(f"{flag} {path}: cannot create the run directory ({exc.strerror or exc})") from None
        self._lock = threading.Lock()
        self._last_flush = time.monotonic()
        _current = self

    def _acquire(self, flag: str) -> IO[str] | None:
        if fcntl is None:
            return None
        fh = open(self.path / LOCK_NAME, "a+")
        try:
            fcntl.flock(fh.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            fh.seek(0)
            owner = fh.read().strip() or "?"
            fh.close()
            raise RunDirectoryBusy(f"{flag} {self.path}: in use by another gcdoctor process (pid {owner}); "
                                   f"choose another --out or wait for it to end") from None
        fh.seek(0)
        fh.truncate()
        fh.write(str(os.getpid()))
        fh.flush()
        return fh

    def file(self, name: str) -> Path:
        return self.path / name

    def write_json(self, name: str, data: Any) -> Path:
        return atomic_write_text(self.path / name, json.dumps(data, indent=1, default=str))

    def write_error(self, text: str) -> Path:
        """Keep a traceback (appended: a run may log more than one)."""
        p = self.path / ERROR_LOG
        with open(p, "a") as fh:
            fh.write(text if text.endswith("\n") else text + "\n")
        return p

    def on_event(self, event: Any) -> None:
        """Bus subscriber: append every event; flush at once except for telemetry samples."""
        if self._events is None:
            return
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
            if self._events is not None and not self._events.closed:
                self._events.close()
            if self._lock_fh is not None and not self._lock_fh.closed:
                self._lock_fh.close()  # releases the lock


class NativeOutputToLog:
    """While active, whatever torch, Kineto, NCCL or CUDA print from C/C++ to file descriptor 2
    (USDT probe lines, profiler stage lines, process-group warnings) and Python warnings go to
    `log_path` (the run directory's gcdoctor.log) instead of the console or the TUI. gcdoctor's own
    messages still reach the terminal: `sys.stderr` is pointed at a copy of the original fd 2."""

    def __init__(self, log_path: str | Path) -> None:
        self.log_path = Path(log_path)
        self._saved_fd: int | None = None
        self._log: IO[str] | None = None
        self._swapped: tuple[Any, Any] | None = None
        self._showwarning: Any = None

    def __enter__(self) -> "NativeOutputToLog":
        import sys
        import warnings
        try:
            sys.stderr.flush()
            self._log = open(self.log_path, "a", buffering=1)
            self._saved_fd = os.dup(2)
            os.dup2(self._log.fileno(), 2)
        except (OSError, ValueError, AttributeError):
            self._restore_fd()
            return self
        if sys.stderr is sys.__stderr__ and sys.__stderr__ is not None:
            term = os.fdopen(os.dup(self._saved_fd), "w", buffering=1, encoding=sys.__stderr__.encoding,
                             errors="backslashreplace")
            self._swapped = (sys.stderr, sys.__stderr__)
            sys.stderr = sys.__stderr__ = term  # type: ignore[misc]  # Textual draws on sys.__stderr__
        log = self._log
        self._showwarning = warnings.showwarning

        def to_log(message, category, filename, lineno, file=None, line=None):  # noqa: ANN001
            log.write(warnings.formatwarning(message, category, filename, lineno, line))

        warnings.showwarning = to_log
        return self

    def _restore_fd(self) -> None:
        if self._saved_fd is not None:
            os.dup2(self._saved_fd, 2)
            os.close(self._saved_fd)
            self._saved_fd = None
        if self._log is not None:
            self._log.close()
            self._log = None

    def __exit__(self, *exc: Any) -> None:
        import sys
        import warnings
        if self._showwarning is not None:
            warnings.showwarning = self._showwarning
        if self._swapped is not None:
            term = sys.stderr
            sys.stderr, sys.__stderr__ = self._swapped  # type: ignore[misc]
            self._swapped = None
            try:
                term.flush()
                term.close()
            except (OSError, ValueError):
                pass
        self._restore_fd()
