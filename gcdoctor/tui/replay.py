"""Replay a recorded event stream into the dashboard, take screenshots, or trim a recording.

    python -m gcdoctor.tui.replay RUN_DIR                       # browse a finished run in the TUI
    python -m gcdoctor.tui.replay RUN_DIR --screenshot a.svg --size 160x48 [--press v enter]
    python -m gcdoctor.tui.replay RUN_DIR --trim small.jsonl    # test data: telemetry cut down

A recording is `events.jsonl` from a diagnose or monitor run directory. Replays use a fixed
clock, so the screen depends only on the recording (what the snapshot tests rely on).
"""
from __future__ import annotations

import argparse
import asyncio
import json
import sys
from pathlib import Path
from typing import Any, Iterable

from gcdoctor.errors import UserError
from gcdoctor.run.events import read_events


def events_path(path: str | Path) -> Path:
    from gcdoctor.recorded import events_of
    p = events_of(path)
    if p is None:
        raise UserError(f"{path}: no events.jsonl (give a gcdoctor run directory or its events.jsonl)")
    return p


def detect_mode(events: list[Any]) -> str:
    for ev in events:
        if type(ev).__name__ == "RunStarted":
            return "monitor" if ev.command == "monitor" else "diagnose"
    return "diagnose"


def trim_events(src: str | Path, dst: str | Path, keep_s: float | None = None, hz: float = 1.05) -> tuple[int, int]:
    """Copy a recording keeping every event but telemetry, which is thinned to `hz` (and cut to the
    last `keep_s` seconds if given). Just over 1 Hz keeps a sample in every one-second sparkline
    cell, small enough to commit. Returns (lines read, lines written)."""
    lines = Path(src).read_text().splitlines()
    last_t = None
    for line in reversed(lines):
        d = json.loads(line)
        if d["type"] == "TelemetrySampled":
            last_t = d["t"]
            break
    out, kept_t = [], None
    for line in lines:
        d = json.loads(line)
        if d["type"] == "TelemetrySampled":
            t = d["t"]
            too_old = keep_s is not None and last_t is not None and t < last_t - keep_s
            if too_old or (kept_t is not None and t - kept_t < 1.0 / hz - 1e-6):
                continue
            kept_t = t
        out.append(line)
    Path(dst).write_text("\n".join(out) + "\n")
    return len(lines), len(out)


class RecordedProcesses:
    """Stands in for a MonitorSession in a replay: the processes its facts.json recorded."""

    def __init__(self, facts_path: Path) -> None:
        self.processes_now: list[dict[str, Any]] = []
        try:
            procs = json.loads(facts_path.read_text()).get("monitor", {}).get("processes") or []
        except (OSError, ValueError, AttributeError):
            return
        self.processes_now = [{"device": p.get("device"), "pid": p.get("pid"), "name": p.get("name"),
                               "used_memory_bytes": p.get("max_used_memory_bytes")} for p in procs]


def make_app(events: Iterable[Any], mode: str | None = None, run_dir: str | Path | None = None):
    """A dashboard replaying `events` with a fixed clock; `run_dir` lends a monitor recording its processes."""
    from gcdoctor.tui.app import DashboardApp
    from gcdoctor.tui.sources import ReplaySource

    events = list(events)
    mode = mode or detect_mode(events)
    monitor = RecordedProcesses(Path(run_dir) / "facts.json") if run_dir is not None and mode == "monitor" else None
    return DashboardApp(ReplaySource(events), mode=mode, clock=lambda: 0.0, monitor=monitor)


async def _screenshot(app, size: tuple[int, int], out: str, press: list[str], theme: str | None) -> None:
    async with app.run_test(size=size) as pilot:
        await pilot.pause()
        app.flush()
        if theme:
            app.theme = theme
        await pilot.pause()
        for key in press:
            await pilot.press(key)
            await pilot.pause()
        path = Path(out)
        app.save_screenshot(filename=path.name, path=str(path.parent or "."))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m gcdoctor.tui.replay", description=__doc__.splitlines()[0])
    ap.add_argument("path", help="run directory or events.jsonl")
    ap.add_argument("--mode", choices=["diagnose", "monitor"], help="default: from the recording")
    ap.add_argument("--screenshot", help="write an SVG screenshot here instead of opening the TUI")
    ap.add_argument("--size", default="80x24", help="terminal size for --screenshot, COLSxROWS")
    ap.add_argument("--press", nargs="*", default=[], help="keys to press before the screenshot")
    ap.add_argument("--theme", help="e.g. textual-light")
    ap.add_argument("--trim", help="write a trimmed copy of the recording here and exit")
    ap.add_argument("--keep-s", type=float, help="--trim: keep telemetry of the last N seconds only")
    ap.add_argument("--hz", type=float, default=1.05, help="--trim: telemetry rate to keep")
    args = ap.parse_args(argv)
    try:
        src = events_path(args.path)
        if args.trim:
            n_in, n_out = trim_events(src, args.trim, args.keep_s, args.hz)
            print(f"{args.trim}: {n_out} of {n_in} events")
            return 0
        app = make_app(read_events(str(src)), args.mode, run_dir=src.parent)
        if args.screenshot:
            cols, _, rows = args.size.partition("x")
            asyncio.run(_screenshot(app, (int(cols), int(rows)), args.screenshot, args.press, args.theme))
            print(args.screenshot)
            return 0
        app.run()
        return 0
    except UserError as exc:
        print(f"gcdoctor: error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
