"""A distributed watched run: one run directory per rank (`out/rank-<r>`, gcdoctor.watch with
ranks="all"), merged for `gcdoctor analyze out`. No torch here.

The merged facts are rank 0's (the model, its checkpointing, recompute and memory, which the
ranks share), with every rank's profiled traces under `watch/rank-<r>/<trace>` keys (so the trace
rules judge each rank's steps) and one RankSummary per rank in `watch.ranks` (the cross-rank
view: who waits for whom).
"""
from __future__ import annotations

import statistics
from pathlib import Path

from gcdoctor.errors import UserError
from gcdoctor.facts import Facts
from gcdoctor.facts.watch import STEP_PARTS, RankSummary, WatchFacts

def rank_summary(rank: int, run_dir: str, facts: Facts) -> RankSummary:
    w = facts.watch
    assert w is not None  # merge_ranks summarises watched runs only
    return RankSummary(rank=rank, run_dir=run_dir, steps=len(w.steps), step_ms_median=w.step_ms_median,
                       phase_ms_median={p: v for p in STEP_PARTS if (v := w.phase_ms_median(p)) is not None},
                       peak_allocated_bytes=w.peak_allocated_bytes)


def merge_ranks(path: str | Path, dirs: dict[int, Path]) -> Facts:
    """The merged facts of a folder of rank directories (`dirs`: gcdoctor.recorded.rank_dirs).
    Raises UserError when it holds none."""
    if not dirs:
        raise UserError(f"{path}: not a gcdoctor run directory (no facts.json), nor a distributed one "
                        "(no rank-<r>/facts.json)")
    loaded: dict[int, Facts] = {}
    watches: dict[int, WatchFacts] = {}
    for r, d in dirs.items():
        try:
            loaded[r] = Facts.load(d / "facts.json")
        except (ValueError, TypeError, KeyError) as exc:
            raise UserError(f"{d / 'facts.json'}: not a valid gcdoctor facts file ({exc})") from None
        w = loaded[r].watch
        if w is None:
            raise UserError(f"{d}: not a watched run (no watch facts): only watched runs are merged by rank")
        watches[r] = w
    traces = {r: f.trace for r, f in loaded.items()}
    base = loaded[min(loaded)]
    base.trace = {}
    for r, f in loaded.items():
        for key, tm in traces[r].items():
            tm.source = f"rank-{r}/{tm.source}" if tm.source else tm.source
            base.trace[key.replace("watch/", f"watch/rank-{r}/", 1) if key.startswith("watch/") else key] = tm
        for k, why in f.unavailable.items():
            if k.startswith("trace.watch/"):
                base.unavailable[k.replace("watch/", f"watch/rank-{r}/", 1)] = why
    base_watch = watches[min(loaded)]
    base_watch.ranks = [rank_summary(r, dirs[r].name, f) for r, f in loaded.items()]
    base.unavailable.pop("watch.ranks", None)
    world = {w.world_size for w in watches.values() if w.world_size}
    if world and max(world) > len(loaded):
        base_watch.notes.append(f"{len(loaded)} of {max(world)} ranks have a run directory here")
    return base


def own_time_ms(s: RankSummary) -> float | None:
    """A rank's own work before the step's first collective: the host's time outside the step
    (fetching its batch) and its model's forward. Not the device's data wait: a wrapper's collective
    at the forward's start (DDP's buffer broadcast) makes every other rank wait there for the slowest."""
    d, f = s.phase_ms_median.get("host_wait"), s.phase_ms_median.get("forward")
    return None if d is None and f is None else (d or 0.0) + (f or 0.0)


def spread(ranks: list[RankSummary]) -> tuple[RankSummary, float, float] | None:
    """(the slowest rank, its own time, the median of the other ranks' own times), or None."""
    timed = [(s, t) for s in ranks if (t := own_time_ms(s)) is not None]
    if len(timed) < 2:
        return None
    slow, t = max(timed, key=lambda st: st[1])
    return slow, t, statistics.median(x for s, x in timed if s is not slow)
