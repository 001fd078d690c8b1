"""Recompute found without labels against gcdoctor's labels: the acceptance check
("recompute share within 2 points of the labelled capture of the same model").

    python bench/recompute_vs_labels.py --same-trace RUN_OR_TRACE ... --runs UNLABELLED_RUN LABELLED_RUN --out F.json

--same-trace: for each labelled trace (a file, or every trace of a run directory), the recompute
share of device busy time (host time on a CPU-only trace) from its gcdoctor/recompute labels, and
from the same trace read as if it had none (gcdoctor.trace.recompute): the method alone, the same
steps. --runs: two watched runs of the same model and settings, one checkpointed by transformers
(no labels), one with gcdoctor's labelled context_fn: each run's facts.watch.recompute share.
"""
from __future__ import annotations

import argparse
import json
from pathlib import Path

from gcdoctor.facts import Facts
from gcdoctor.trace import compute_metrics, load_trace
from gcdoctor.trace import windows as trace_windows


def _traces(path: Path) -> list[Path]:
    return sorted((path / "traces").glob("*.json*")) if path.is_dir() else [path]


def _share(metrics: dict) -> dict:
    """Recompute share of the whole trace: device busy, or host time for a CPU-only trace."""
    whole, rec = metrics["all"], metrics.get("recompute")
    steps = [m for k, m in metrics.items() if k.startswith("step:")]
    if whole.recompute_share is not None:
        return {"basis": "device busy", "share": whole.recompute_share, "recompute_us": whole.recompute_busy_us,
                "source": rec.window_source if rec else None, "regions": rec.range_count if rec else 0}
    if rec is None:
        return {"basis": None, "share": None, "source": None, "regions": 0}
    wall = sum(m.wall_us or 0.0 for m in steps) or whole.wall_us
    return {"basis": "host (CPU op time) over the profiler steps", "share": rec.wall_us / wall,
            "recompute_us": rec.wall_us, "source": rec.window_source, "regions": rec.range_count}


def same_trace(path: Path) -> dict:
    tables = load_trace(path)
    labelled = _share(compute_metrics(tables))
    orig = trace_windows.WindowFinder.labels
    trace_windows.WindowFinder.labels = lambda self: [w for w in orig(self) if not w.name.startswith("recompute")]
    try:
        unlabelled = _share(compute_metrics(tables))
    finally:
        trace_windows.WindowFinder.labels = orig
    diff = None if labelled["share"] is None or unlabelled["share"] is None else \
        100.0 * (unlabelled["share"] - labelled["share"])
    return {"trace": str(path), "labelled": labelled, "unlabelled": unlabelled, "difference_points": diff}


def run_share(run: Path) -> dict:
    rc = Facts.load(run / "facts.json").watch.recompute
    if rc is None:
        return {"run": str(run), "share": None}
    return {"run": str(run), "share": rc.share, "source": rc.source, "kind": rc.kind, "basis": rc.time_basis,
            "recompute_ms": rc.recompute_ms, "step_ms": rc.step_ms, "regions_per_step": rc.regions_per_step,
            "expected_recompute_ms": rc.expected_recompute_ms}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--same-trace", nargs="*", default=[], type=Path)
    ap.add_argument("--runs", nargs=2, type=Path, metavar=("UNLABELLED", "LABELLED"))
    ap.add_argument("--out", type=Path)
    args = ap.parse_args()
    result: dict = {"same_trace": [], "runs": None}
    print(f"{'trace':44s} {'labelled %':>10s} {'unlabelled %':>12s} {'diff pts':>8s}")
    for p in args.same_trace:
        for t in _traces(p):
            r = same_trace(t)
            result["same_trace"].append(r)
            lab, unl = r["labelled"]["share"], r["unlabelled"]["share"]
            d = r["difference_points"]
            print(f"{t.name[-44:]:44s} {_pct(lab):>10s} {_pct(unl):>12s} {'' if d is None else f'{d:+.2f}':>8s}")
    if args.runs:
        a, b = run_share(args.runs[0]), run_share(args.runs[1])
        diff = None if a["share"] is None or b["share"] is None else 100.0 * (a["share"] - b["share"])
        result["runs"] = {"unlabelled": a, "labelled": b, "difference_points": diff}
        print(f"runs: unlabelled {_pct(a['share'])} % ({a.get('source')}), labelled {_pct(b['share'])} % "
              f"({b.get('source')}), difference {'' if diff is None else f'{diff:+.2f}'} points")
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(result, indent=1))


def _pct(x: float | None) -> str:
    return "-" if x is None else f"{100 * x:.2f}"


if __name__ == "__main__":
    main()
