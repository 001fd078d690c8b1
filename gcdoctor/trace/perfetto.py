"""The run's telemetry on the trace timeline: telemetry.csv as Chrome-trace counter tracks.

Each profiler trace of a run gets, inside its own time window (and a second either side), one
counter track ("ph": "C") per telemetry series (GPU utilisation, PCIe RX/TX, power, SM clock, host
CPU, RSS, ...) under a process named "gcdoctor telemetry", so that ui.perfetto.dev shows the
kernels and the counters on one timeline. The clocks are joined through wall time: Kineto's `ts`
is microseconds since `baseTimeNanoseconds` (unix time), telemetry.csv has each sample's unix
wall time.

Trace files are named the way torch.profiler.tensorboard_trace_handler names them:
`traces/VARIANT/HOST_PID.MILLISECONDS.pt.trace.json.gz`, one folder ("run") per variant, so
TensorBoard's profiler plugin and HTA find them too.
"""
from __future__ import annotations

import csv
import gzip
import json
import math
import os
import socket
import time
from pathlib import Path
from typing import Any

from gcdoctor.atomic import atomic_write_bytes

TELEMETRY_PID = 0x7E1E  # a pid no profiler uses: the counter tracks' own process in Perfetto
TELEMETRY_PROCESS = "gcdoctor telemetry"
MARGIN_S = 1.0
TRACE_SUFFIXES = (".pt.trace.json.gz", ".pt.trace.json", ".json.gz", ".json")


def worker_name() -> str:
    """torch's tensorboard_trace_handler default: HOST_PID (the host made file-name safe)."""
    from gcdoctor.run.rundir import safe_name
    return f"{safe_name(socket.gethostname(), 60)}_{os.getpid()}"


def trace_file_name(when: float | None = None) -> str:
    """HOST_PID.MS.pt.trace.json.gz, as tensorboard_trace_handler(use_gzip=True) writes."""
    ms = int((time.time() if when is None else when) * 1000)
    return f"{worker_name()}.{ms}.pt.trace.json.gz"


def read_telemetry(path: str | Path) -> tuple[list[str], list[tuple[float, list[float | None]]]]:
    """(series names, [(wall seconds, values)]) from a run's telemetry.csv; empty if unreadable."""
    try:
        with open(path, newline="") as fh:
            reader = csv.reader(fh)
            header = next(reader, None)
            if not header or header[:2] != ["t_monotonic_s", "wall_time_s"]:
                return [], []
            names = header[2:]
            rows = []
            for row in reader:
                if len(row) != len(header):
                    continue  # a line cut short by a kill
                try:
                    wall = float(row[1])
                    values = [float(c) if c else None for c in row[2:]]
                except ValueError:
                    continue
                if math.isfinite(wall):
                    rows.append((wall, [v if v is not None and math.isfinite(v) else None for v in values]))
            return names, rows
    except OSError:
        return [], []


def _open(path: Path) -> Any:
    data = path.read_bytes()
    if data[:2] == b"\x1f\x8b":
        data = gzip.decompress(data)
    try:
        import msgspec
        return msgspec.json.decode(data)
    except Exception:  # noqa: BLE001 - msgspec refuses what json may read (ints beyond 64 bits)
        return json.loads(data)


def _encode(obj: Any) -> bytes:
    try:
        import msgspec
        return msgspec.json.encode(obj)
    except Exception:  # noqa: BLE001 - see _open
        return json.dumps(obj).encode()


def counter_events(names: list[str], rows: list[tuple[float, list[float | None]]], base_us: float,
                   t0_us: float, t1_us: float) -> list[dict[str, Any]]:
    """Counter events for the samples whose time falls in [t0_us, t1_us] (trace microseconds)."""
    events: list[dict[str, Any]] = [
        {"ph": "M", "name": "process_name", "pid": TELEMETRY_PID, "tid": 0, "args": {"name": TELEMETRY_PROCESS}},
        {"ph": "M", "name": "process_sort_index", "pid": TELEMETRY_PID, "tid": 0, "args": {"sort_index": -1}},
    ]
    n = 0
    for wall, values in rows:
        ts = wall * 1e6 - base_us
        if ts < t0_us or ts > t1_us:
            continue
        for name, v in zip(names, values):
            if v is not None:
                events.append({"ph": "C", "name": name, "pid": TELEMETRY_PID, "tid": 0, "ts": round(ts, 3),
                               "cat": "telemetry", "args": {"value": v}})
                n += 1
    return events if n else []


def add_counter_tracks(trace_path: str | Path, names: list[str], rows: list[tuple[float, list[float | None]]],
                       trace_name: str | None = None) -> int:
    """Add the telemetry that overlaps the trace as counter tracks; rewrite the file atomically.
    Returns the number of counter samples added (0: nothing overlapped or the trace is unreadable)."""
    path = Path(trace_path)
    try:
        doc = _open(path)
    except (OSError, ValueError, EOFError):
        return 0
    if not isinstance(doc, dict) or not isinstance(doc.get("traceEvents"), list):
        return 0
    events = doc["traceEvents"]
    if any(isinstance(e, dict) and e.get("pid") == TELEMETRY_PID for e in events[-4:]) or \
            any(isinstance(e, dict) and e.get("cat") == "telemetry" for e in events[-4:]):
        return 0  # already added
    base = doc.get("baseTimeNanoseconds")
    base_us = float(base) / 1e3 if isinstance(base, (int, float)) and not isinstance(base, bool) else 0.0
    ts = [e["ts"] for e in events if isinstance(e, dict) and isinstance(e.get("ts"), (int, float))
          and not isinstance(e.get("ts"), bool) and math.isfinite(e["ts"])]
    if not ts:
        return 0
    t0, t1 = min(ts) - MARGIN_S * 1e6, max(ts) + MARGIN_S * 1e6
    added = counter_events(names, rows, base_us, t0, t1)
    if trace_name is not None:
        doc["traceName"] = trace_name
    if not added and trace_name is None:
        return 0
    events.extend(added)
    data = _encode(doc)
    if path.name.endswith(".gz"):
        data = gzip.compress(data, compresslevel=1)
    atomic_write_bytes(path, data)
    return sum(1 for e in added if e["ph"] == "C")


def trace_files(run_dir: str | Path) -> list[Path]:
    root = Path(run_dir) / "traces"
    if not root.is_dir():
        return []
    return sorted(p for p in root.rglob("*") if p.is_file() and p.name.endswith(TRACE_SUFFIXES))


def annotate_run(run_dir: str | Path) -> dict[str, int]:
    """Counter tracks of the run's telemetry.csv into each of its traces: {relative path: samples}."""
    run_dir = Path(run_dir)
    names, rows = read_telemetry(run_dir / "telemetry.csv")
    out: dict[str, int] = {}
    if not rows:
        return out
    for p in trace_files(run_dir):
        out[str(p.relative_to(run_dir))] = add_counter_tracks(p, names, rows, trace_name=str(p))
    return out
