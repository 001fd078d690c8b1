"""Regenerate the TUI screenshots in docs/screenshots/ from recorded run directories.

    python bench/tui_screenshots.py [--monitor-run DIR] [--out docs/screenshots]

Each screenshot replays a real run's events.jsonl into the dashboard (fixed clock), saves
Textual's SVG and converts it to PNG with rsvg-convert (apt librsvg2-bin) or headless
Chromium, whichever is present. Give --monitor-run a directory recorded by
`gcdoctor monitor --no-tui --seconds 30 --out DIR` beside a training job on a GPU machine
to add the GPU monitor screen. Give --full-run DIR (a full `gcdoctor diagnose` recorded on a GPU)
with --verdicts REPORT.json (`gcdoctor analyze DIR`'s report.json) to add that run's screens, its
live verdicts replaced by those of the rules as they are now.
"""
from __future__ import annotations

import argparse
import asyncio
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from gcdoctor.run.events import MeasurementRecorded, RunFinished, StepMeasured, VerdictIssued, read_events
from gcdoctor.tui.replay import _screenshot, make_app

REPO = Path(__file__).resolve().parents[1]
H200 = REPO / "samples" / "h200-llama3-8b-2layers-sweep"
CPU = REPO / "tests" / "data" / "tui" / "diagnose-cpu-sweep.events.jsonl"
MONITOR_CPU = REPO / "tests" / "data" / "tui" / "monitor-cpu.events.jsonl"


def cut_mid_run(path: Path, rows: int, steps: int) -> list:
    out, n_rows, n_steps = [], 0, 0
    for ev in read_events(str(path)):
        out.append(ev)
        n_rows += isinstance(ev, MeasurementRecorded)
        n_steps += n_rows >= rows and isinstance(ev, StepMeasured)
        if n_steps == steps:
            break
    return out


def to_png(svg: Path, png: Path) -> None:
    view = re.search(r'viewBox="0 0 ([\d.]+) ([\d.]+)"', svg.read_text())
    w, h = (int(float(x) + 0.999) for x in view.groups())
    if shutil.which("rsvg-convert"):
        subprocess.run(["rsvg-convert", "-o", str(png), str(svg)], check=True)
        return
    chrome = shutil.which("chromium") or shutil.which("chromium-browser") or shutil.which("google-chrome")
    if chrome is None:
        sys.exit("need rsvg-convert (apt-get install -y librsvg2-bin) or chromium to convert SVG to PNG")
    subprocess.run([chrome, "--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
                    f"--screenshot={png.resolve()}", f"--window-size={w},{h}", svg.name], check=True, cwd=svg.parent,
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def rejudged(events_path: Path, report_json: Path) -> list:
    """The recorded events with their VerdictIssued events replaced by a later judgement's verdicts
    (issued where the run finished), so a screenshot shows what the rules say now."""
    import json
    verdicts = json.loads(report_json.read_text())["verdicts"]
    out = [e for e in read_events(str(events_path)) if not isinstance(e, VerdictIssued)]
    end = next((i for i, e in enumerate(out) if isinstance(e, RunFinished)), len(out))
    return out[:end] + [VerdictIssued(v) for v in verdicts] + out[end:]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=str(REPO / "docs" / "screenshots"))
    ap.add_argument("--monitor-run", help="a monitor run directory recorded on a GPU machine")
    ap.add_argument("--full-run", help="a full diagnose run directory recorded on a GPU machine (with --verdicts)")
    ap.add_argument("--verdicts", help="report.json of `gcdoctor analyze` of --full-run")
    ap.add_argument("--only-full", action="store_true", help="only the --full-run screens")
    args = ap.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    h200 = list(read_events(str(H200 / "events.jsonl")))
    shots = [  # name, events, mode, run_dir, size, keys, theme
        ("diagnose-h200-160x48", h200, None, None, (160, 48), [], None),
        ("diagnose-h200-80x24", h200, None, None, (80, 24), [], None),
        ("diagnose-h200-verdict-80x24", h200, None, None, (80, 24), ["v", "enter"], None),
        ("diagnose-cpu-running-80x24", cut_mid_run(CPU, 12, 2), "diagnose", None, (80, 24), [], None),
        ("diagnose-cpu-running-160x48", cut_mid_run(CPU, 12, 2), "diagnose", None, (160, 48), [], None),
        ("diagnose-h200-light-80x24", h200, None, None, (80, 24), [], "textual-light"),
        ("help-80x24", h200, None, None, (80, 24), ["question_mark"], None),
        ("monitor-cpu-100x30", list(read_events(str(MONITOR_CPU))), "monitor", None, (100, 30), [], None),
    ]
    if args.only_full:
        shots = []
    if args.full_run:
        full = rejudged(Path(args.full_run) / "events.jsonl", Path(args.verdicts))
        shots += [("diagnose-h200-full-80x24", full, None, None, (80, 24), [], None),
                  ("diagnose-h200-full-verdict-80x24", full, None, None, (80, 24), ["v", "enter"], None)]
    if args.monitor_run:
        run = Path(args.monitor_run)
        events = list(read_events(str(run / "events.jsonl")))
        shots += [("monitor-gpu-160x48", events, "monitor", run, (160, 48), [], None),
                  ("monitor-gpu-80x24", events, "monitor", run, (80, 24), [], None)]
    with tempfile.TemporaryDirectory() as tmp:
        for name, events, mode, run_dir, size, keys, theme in shots:
            svg = Path(tmp) / f"{name}.svg"
            asyncio.run(_screenshot(make_app(events, mode, run_dir), size, str(svg), keys, theme))
            to_png(svg, out / f"{name}.png")
            print(out / f"{name}.png")


if __name__ == "__main__":
    main()
