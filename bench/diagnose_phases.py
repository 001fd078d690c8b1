"""Seconds per probe and per phase of a finished diagnose run, from its events.jsonl.

    python bench/diagnose_phases.py RUN_DIR [--json OUT]

Phases: start-up (process start to the run's first event: imports, device set-up), model build,
warm-up steps, timed steps (measured and search steps), profiled steps, trace analysis, and the
rest of each probe (step set-up, freeing memory, fresh processes' waits, its own logic); after the
probes, judging and report writing. Fresh processes a probe starts (the allocator probe's) write
their own events.jsonl under the run directory: they are listed with their own phases.
Step phases add up the steps' own times (StepMeasured), build and analysis their PhaseTimed events.
"""
from __future__ import annotations

import argparse
import json
import sys
from collections import defaultdict
from pathlib import Path

PHASES = ("model build", "warm-up", "timed steps", "profiled steps", "trace analysis")
STEP_PHASE = {"warmup": "warm-up", "measure": "timed steps", "search": "timed steps", "profile": "profiled steps"}


def read(path: Path) -> list[dict]:
    out = []
    for line in path.read_text(errors="replace").splitlines():
        try:
            ev = json.loads(line)
        except ValueError:
            continue
        if isinstance(ev, dict) and ev.get("type") != "TelemetrySampled":
            out.append(ev)
    return out


def phases(events: list[dict]) -> dict:
    """{probes: {name: {seconds, phases}}, startup_s, after_s, total_s} of one events.jsonl."""
    probes: dict[str, dict] = {}
    per: dict[str, dict[str, float]] = defaultdict(lambda: defaultdict(float))
    start = next((e for e in events if e["type"] == "RunStarted"), None)
    first_wall = events[0]["wall"] if events else None
    last_probe_end = None
    for e in events:
        t = e["type"]
        if t == "ProbeFinished":
            probes[e["probe"]] = {"seconds": e.get("seconds"), "ok": e.get("ok", True)}
            last_probe_end = e["wall"]
        elif t == "StepMeasured":
            per[e["probe"]][STEP_PHASE.get(e.get("phase"), "timed steps")] += (e.get("step_ms") or 0) / 1e3
        elif t == "PhaseTimed":
            per[e["probe"]][e["phase"]] += e.get("seconds") or 0.0
    end = next((e for e in reversed(events) if e["type"] == "RunFinished"), None)
    out = {"startup_s": (start or {}).get("startup_s"), "probes": {}}
    for name in list(probes) + [p for p in per if p not in probes]:
        ph = dict(per.get(name, {}))
        total = (probes.get(name) or {}).get("seconds")
        if total is not None:
            ph["other"] = max(0.0, total - sum(v for k, v in ph.items() if k != "start-up"))
        out["probes"][name] = {"seconds": total, "phases": ph}
    if end is not None and last_probe_end is not None:
        out["after_s"] = end["wall"] - last_probe_end
    if end is not None and first_wall is not None:
        out["total_s"] = end["wall"] - first_wall + (out["startup_s"] or 0.0)
    return out


def _fmt(v: float | None) -> str:
    return f"{v:7.1f}" if v is not None else "      -"


def table(res: dict, fresh: dict[str, dict]) -> list[str]:
    cols = ("model build", "warm-up", "timed steps", "profiled steps", "trace analysis", "other")
    heads = ("build", "warm-up", "timed", "profile", "analysis", "other")
    lines = [f"{'probe':12} {'total s':>7} " + " ".join(f"{h:>7}" for h in heads)]
    if res.get("startup_s") is not None:
        lines.append(f"{'start-up':12} {_fmt(res['startup_s'])}")
    for name, p in res["probes"].items():
        ph = p["phases"]
        lines.append(f"{name:12} {_fmt(p['seconds'])} " + " ".join(_fmt(ph.get(c)) for c in cols))
    if res.get("after_s") is not None:
        lines.append(f"{'report':12} {_fmt(res['after_s'])}   (judging, report writing)")
    if res.get("total_s") is not None:
        lines.append(f"{'total':12} {_fmt(res['total_s'])}")
    if fresh:
        lines.append("fresh processes (inside their probe's total):")
        for label, r in fresh.items():
            p = next(iter(r["probes"].values()), {"phases": {}})["phases"]
            lines.append(f"  {label:30} start-up {_fmt(p.get('start-up'))} build {_fmt(p.get('model build'))} "
                         f"steps {_fmt(p.get('warm-up', 0) + p.get('timed steps', 0))}")
    return lines


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("run_dir", type=Path)
    ap.add_argument("--json", type=Path, help="write the phases as JSON")
    a = ap.parse_args()
    ev_path = a.run_dir / "events.jsonl"
    if not ev_path.is_file():
        print(f"{a.run_dir}: no events.jsonl (not a run directory)", file=sys.stderr)
        return 2
    res = phases(read(ev_path))
    fresh = {str(p.parent.relative_to(a.run_dir)): phases(read(p))
             for p in sorted(a.run_dir.glob("*/*/events.jsonl"))}
    print("\n".join(table(res, fresh)))
    if a.json:
        a.json.write_text(json.dumps({"run": res, "fresh": fresh}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
