"""GC027 straggler-rank."""
from __future__ import annotations

from gcdoctor.types import CONFIGURATION, Evidence, Rule, Verdict
from gcdoctor.facts import Facts


class StragglerRankRule(Rule):
    """What it checks:
    For a folder of per-rank traces (`gcdoctor analyze DIR`), whether one rank does more of its own
    work per steady-state step than the others: its device time outside collective kernels plus the
    device idle its host caused. In synchronous data-parallel training the other ranks wait for it
    inside their collectives, so the whole job runs at the straggler's pace. It also reports the
    spread of step time and of device idle across the ranks.

    Why it matters:
    A straggler rank (a slower GPU, a host with less free CPU, uneven data, a rank that logs or
    checkpoints) sets every rank's step time; its cause is on that rank alone, and the other ranks'
    traces show only long collectives.

    Evidence:
    Per rank: median steady step, own work per step, collective time per step, device idle share;
    the spread of step time and idle across ranks.

    How to fix:
    Look at the straggler rank's own verdicts (GC021-GC025 name its host cause); balance the data
    (sequence lengths per rank), move logging and checkpointing off the critical path or to every
    rank equally, check that rank's host for competing processes and its GPU's clocks.
    """

    code = "GC027"
    slug = "straggler-rank"
    title = "A straggler rank"
    requires = ("ranks",)
    topic = "trace"
    defaults = {
        # own work of the slowest rank over the median rank: beyond the few-percent spread of
        # identical ranks' step times
        "min_own_excess": 0.1,
    }

    def check(self, facts: Facts, t: dict[str, float]) -> list[Verdict]:
        s = facts.ranks
        if s is None:
            return [self.inconclusive(facts.missing_reason("ranks"))]
        if s.straggler_rank is None or not s.own_ms_median:
            return [self.inconclusive(s.note or "no rank has steady-state device metrics", scope=CONFIGURATION)]
        ev = [Evidence("ranks", len(s.ranks)), Evidence("median steady step", s.step_ms_median, "ms"),
              Evidence("step time spread across ranks", s.step_ms_spread_pct, "% of the median"),
              Evidence("device idle spread across ranks",
                       None if s.idle_share_spread is None else 100 * s.idle_share_spread, "points")]
        for r in s.ranks:
            ev.append(Evidence(f"rank {r.rank}: own work / collectives / idle",
                               "n/a" if r.own_ms is None else
                               f"{r.own_ms:.2f} ms / {r.comm_ms:.2f} ms / {100 * (r.idle_share or 0):.0f}%"))
        assert s.straggler_own_ms is not None  # recorded with straggler_rank
        excess = s.straggler_own_ms / s.own_ms_median - 1
        if excess < t["min_own_excess"]:
            return [self.passed(f"No straggler rank: the ranks' own work per step is within {100 * excess:.0f}% of "
                                "the median", ev, scope=CONFIGURATION)]
        return [self.fired(
            "warning", f"Rank {s.straggler_rank} is the straggler: {s.straggler_own_ms:.1f} ms of its own work per "
            f"step, {100 * excess:.0f}% over the median rank", ev,
            "Its device work outside collectives plus the idle its host caused exceed the other ranks'; in "
            "synchronous training the others wait for it in their collectives.",
            f"Read rank {s.straggler_rank}'s own verdicts (GC021-GC025 name its host cause); balance the data across "
            "ranks, move logging and checkpointing off the critical path, check its host and GPU.",
            subject=f"rank/{s.straggler_rank}", scope=CONFIGURATION)]
