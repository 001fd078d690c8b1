"""GC062 recompute-regather."""
from __future__ import annotations

from gcdoctor.types import CONFIGURATION, EXPERIMENT, Evidence, Rule, Verdict
from gcdoctor.facts import Facts
from gcdoctor.facts.distributed import CommMetrics
from gcdoctor.rules._dist import per_step, setup

# (with checkpointing, without it, what the pair is) of the sharding probe
PROBE_PAIRS = (("sharding/fsdp2/gc", "sharding/fsdp2/no_gc"), ("sharding/fsdp2/gc-wrapper", "sharding/fsdp2/no_gc"),
               ("sharding/fsdp2-keep/gc", "sharding/fsdp2-keep/no_gc"), ("sharding/zero3/gc", "sharding/zero3/no_gc"))


def _gathers(rows: list[CommMetrics], phase: str | None = None) -> float:
    """All-gathers per step of the rank that issues the most (ranks issue the same collectives)."""
    return max((c.calls("all_gather", phase) for c in rows), default=0.0)


class RecomputeRegatherRule(Rule):
    """What it checks:
    Whether checkpointing makes the sharded model gather its parameters more often: the
    parameter all-gathers per step with checkpointing against the same sharding without it, counted
    on every rank from the collectives the host issued, and how many of them the recompute itself
    issued. For the user's setup (the sweep), each checkpointed variant of the sharding probe, and
    each granularity of the granularity probe's sharded model against no checkpointing.

    Why it matters:
    A checkpointed layer is run again inside backward. If its parameters were resharded after its
    forward and the recompute is not inside the unit's own backward, the recompute gathers them
    once more, and the backward may gather them yet again: one extra all-gather of every layer per
    step, communication that checkpointing added on top of its recompute. FSDP2 runs the recompute
    inside the unit's backward, whichever order checkpoint and fully_shard are applied in, so its
    backward's gather serves the recompute; ZeRO-3 fetches for the recompute's forward and keeps the
    parameters for the backward when they are reused soon enough. This rule checks which happened.

    Evidence:
    All-gathers per step with and without checkpointing, those issued in forward, backward and the
    recompute, reduce-scatters per step, and the difference.

    How to fix:
    Apply checkpointing inside each unit (torch's checkpoint_wrapper before fully_shard, the
    torchtitan order) so the unit's backward gather serves its recompute; with ZeRO-3 raise
    stage3_max_reuse_distance to at least a layer's parameters so the recompute's gather is kept
    for the backward; keep gathered parameters from forward to backward
    (reshard_after_forward=False) where memory allows.
    """

    code = "GC062"
    slug = "recompute-regather"
    title = "Extra all-gathers caused by the recompute"
    requires = ("distributed.comm",)
    topic = "distributed"
    defaults = {
        # all-gathers are counted exactly (a count per step, the same on every step): any extra one
        # per step is the recompute's (half a call tolerates a collective issued every other step)
        "max_extra_gathers_per_step": 0.5,
    }

    def check(self, facts: Facts, t: dict[str, float]):
        d = facts.distributed
        if d is None:
            return self.inconclusive(facts.missing_reason("distributed.comm"))
        pairs = [("sweep/gc", "sweep/no_gc", CONFIGURATION)] + [(a, b, EXPERIMENT) for a, b in PROBE_PAIRS]
        # the granularity probe on a sharded model: each checkpointing granularity against none
        pairs += [(k, "granularity/model/none", EXPERIMENT) for k in sorted({c.key for c in d.comm})
                  if k.startswith("granularity/model/") and k != "granularity/model/none"]
        out = []
        for on, off, scope in pairs:
            a, b = d.comm_of(on), d.comm_of(off)
            if not a or not b:
                continue
            out.append(self._judge(d, on, off, a, b, scope, t))
        if not out:
            return self.inconclusive("no sharded variant was profiled both with and without checkpointing")
        return out

    def _judge(self, d, on: str, off: str, a: list[CommMetrics], b: list[CommMetrics], scope: str,
               t: dict[str, float]) -> Verdict:
        g_on, g_off = _gathers(a), _gathers(b)
        extra = g_on - g_off
        in_rec = _gathers(a, "recompute")
        ev = [Evidence("all-gathers per step with checkpointing", g_on),
              Evidence("all-gathers per step without", g_off),
              Evidence("with checkpointing: in forward", _gathers(a, "forward")),
              Evidence("with checkpointing: in backward", _gathers(a, "backward")),
              Evidence("with checkpointing: issued by the recompute", in_rec),
              Evidence("reduce-scatters per step with checkpointing", max(c.calls("reduce_scatter") for c in a)),
              Evidence("extra all-gathers per step", extra)]
        where = dict(subject=on, scope=scope)
        if scope == CONFIGURATION:
            ev.insert(0, Evidence("setup", setup(d)))
        if not g_on and not g_off:
            v = self.inconclusive(f"{on}: no parameter all-gather with or without checkpointing" + (
                " (world size 1: FSDP2 and ZeRO-3 gather nothing)" if d.world_size == 1 else ""), **where)
            v.evidence = ev
            return v
        if extra > t["max_extra_gathers_per_step"]:
            line = f"checkpointing adds {per_step(extra)} all-gathers per step ({on})"
            return self.fired(
                "warning", f"{on}: checkpointing adds {per_step(extra)} parameter all-gathers per step "
                f"({per_step(g_on)} against {per_step(g_off)} without; {per_step(in_rec)} issued by the recompute)", ev,
                "The recompute gathers parameters that were resharded after the forward, and the backward "
                "gathers them again: communication checkpointing adds on top of its recompute.",
                "Apply checkpoint_wrapper inside each unit before fully_shard (torchtitan order); with ZeRO-3 raise "
                "stage3_max_reuse_distance; or keep parameters gathered (reshard_after_forward=False).",
                line=line if scope == CONFIGURATION else line.replace(" per step", "/step here"), **where)
        back = _gathers(a, "backward") + in_rec
        why = (f" (the backward's {per_step(back)} re-gathers, from resharding after the forward, serve the "
               "recompute)" if back else " (no parameter is gathered again in backward)")
        return self.passed(f"{on}: checkpointing adds no all-gather: {per_step(g_on)} per step with and "
                           f"{per_step(g_off)} without{why}", ev, **where)
