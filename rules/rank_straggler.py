"""GC050 rank-straggler."""
from __future__ import annotations

from gcdoctor.types import CONFIGURATION, Evidence, Rule
from gcdoctor.facts import Facts
from gcdoctor.watching.ranks import own_time_ms, spread


class RankStragglerRule(Rule):
    """What it checks:
    In a distributed watched run (one run directory per rank, merged by `gcdoctor analyze`), each
    rank's own work per step before the step's first collective: the host's time outside the step
    (fetching the batch: from one step's end to the next one's start) plus the model's forward
    (medians over the unprofiled steps), and how far the slowest rank is from the others' median. The
    device's data wait is not used: a wrapper's collective at the forward's start (DDP's buffer
    broadcast) makes every rank wait there for the slowest one.

    Why it matters:
    Data-parallel ranks meet at every gradient all-reduce (DDP) or reduce-scatter (FSDP): a step
    lasts as long as its slowest rank, and the others wait in the collective, which makes their
    backward look slow. The straggler's own data wait and forward show who is late; checkpointing
    settings cannot fix it.

    Evidence:
    Host wait + forward of the slowest rank and the others' median, the difference per step and as a
    share of the step, and every rank's value.

    How to fix:
    A slow data wait on one rank: its loader (num_workers, pinned memory, an uneven shard, a busy
    disk or CPU on that node). A slow forward: uneven batches (variable sequence lengths; pack or
    bucket them), a throttled or shared device, CPU threads of that rank contending (set
    OMP_NUM_THREADS, pin ranks to cores).
    """

    code = "GC050"
    slug = "rank-straggler"
    title = "One rank holds the others back"
    requires = ("watch.ranks",)
    scope = CONFIGURATION
    topic = "watch"
    defaults = {
        # a tenth of the step: beyond step-to-step noise, and what every other rank then waits
        "min_share_pct": 10.0,
        # below a millisecond a difference is scheduling noise, whatever its share
        "min_ms": 1.0,
    }

    def check(self, facts: Facts, t: dict[str, float]):
        if facts.watch is None:
            return self.inconclusive(facts.missing_reason("watch.ranks"))
        ranks = facts.watch.ranks
        if len(ranks) < 2:
            return self.inconclusive(f"{len(ranks)} rank directory: nothing to compare", subject="watch")
        sp = spread(ranks)
        if sp is None:
            return self.inconclusive("the ranks' steps have no phase times (no model forward hooks fired)",
                                     subject="watch")
        slow, own, med = sp
        step = slow.step_ms_median or 0.0
        diff = own - med
        share = 100.0 * diff / step if step else 0.0
        ev = [Evidence("slowest rank", slow.rank), Evidence("its host wait + forward", own, "ms/step"),
              Evidence("the other ranks' host wait + forward (median)", med, "ms/step"),
              Evidence("difference", diff, "ms/step"),
              Evidence("difference, share of the step", share, "%")]
        ev += [Evidence(f"rank {s.rank}: host wait + forward", own_time_ms(s), "ms/step") for s in ranks]
        if diff >= t["min_ms"] and share >= t["min_share_pct"]:
            part = ("data loading" if (slow.phase_ms_median.get("host_wait") or 0.0) - _median_of(ranks, "host_wait")
                    >= (slow.phase_ms_median.get("forward") or 0.0) - _median_of(ranks, "forward") else "forward")
            return self.fired(
                "warning", f"Rank {slow.rank} holds the others back: its {part} makes it {diff:.1f} ms per step "
                f"({share:.0f}% of the step) later than the others", ev,
                "Every rank waits for the slowest one at the step's gradient collective, so its delay is paid by "
                f"all {len(ranks)} ranks on every step.",
                "Data loading: that rank's loader (workers, pinned memory, its shard, its node's CPU and disk). "
                "Forward: uneven batches (bucket or pack sequences), a throttled device, CPU contention "
                "(OMP_NUM_THREADS, core pinning).", subject="watch",
                line=f"rank {slow.rank} is {diff:.1f} ms/step late ({part}): every rank waits for it")
        return self.passed(f"The {len(ranks)} ranks are balanced: the slowest one's host wait + forward is "
                           f"{diff:.1f} ms from the others'", ev, subject="watch")


def _median_of(ranks, phase: str) -> float:
    import statistics
    xs = [s.phase_ms_median[phase] for s in ranks if phase in s.phase_ms_median]
    return statistics.median(xs) if xs else 0.0
