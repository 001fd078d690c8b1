"""GC003 oom-boundary-gain."""
from __future__ import annotations

from gcdoctor.units import fmt_bytes
from gcdoctor.types import Evidence, Rule
from gcdoctor.facts import Facts


class OomBoundaryGainRule(Rule):
    """What it checks:
    The largest batch that fits with and without layer checkpointing (doubling then bisection,
    each trial a full step including the optimizer, so optimizer states are counted), and the
    ratio between them.

    Why it matters:
    Checkpointing is bought with step time; what it buys is batch (or sequence) headroom. If the
    boundary barely moves, the memory is somewhere checkpointing cannot reach (model states,
    the loss), and the recompute is paid for nothing.

    Evidence:
    Max batch without and with checkpointing, the gain factor, tokens/s at each maximum.

    How to fix:
    If the gain is small, see the memory-saving and model-states verdicts: shard or offload the
    optimizer states, use a chunked loss. If checkpointing is needed to fit batch 1, keep it and
    tune its granularity.
    """

    code = "GC003"
    slug = "oom-boundary-gain"
    title = "OOM boundary gain"
    requires = ("sweep.max_batch",)
    topic = "sweep"
    defaults = {
        # a checkpointing that does not at least raise the batch by half rarely pays its ~25-35%
        "min_gain": 1.5,
    }

    def check(self, facts: Facts, t: dict[str, float]):
        sweep = facts.sweep
        if sweep is None:
            return self.inconclusive(facts.missing_reason("sweep.max_batch"))
        if not sweep.searched:
            if sweep.fixed_by == "cpu-default":
                return self.inconclusive("on the CPU without --memory-limit the sweep measures a few fixed batch "
                                         "sizes: no search for the largest batch (give --memory-limit)")
            return self.inconclusive("batch sizes were fixed (--batch-sizes): no search for the largest batch")
        off, on = sweep.max_batch.get("no_gc"), sweep.max_batch.get("gc")
        capped_on = sweep.max_batch_capped.get("gc", False)
        at_least = "at least " if capped_on else ""
        ev = [Evidence("max batch without GC", off), Evidence("max batch with GC", on)]
        for variant, b in (("no_gc", off), ("gc", on)):
            m = sweep.get(variant, b) if b else None
            if m is not None and m.tokens_per_s:
                ev.append(Evidence(f"tokens/s at that batch ({variant})", m.tokens_per_s, "tok/s"))
            oom = min((x for x in sweep.measurements if x.variant == variant and not x.fits and x.oom is not None
                       and (b is None or x.batch_size > b)), key=lambda x: x.batch_size, default=None)
            if oom is not None and oom.oom is not None:
                o = oom.oom
                held = "" if o.reserved_unallocated_bytes is None else (
                    f", {fmt_bytes(o.reserved_unallocated_bytes)} cached but unallocated")
                ev.append(Evidence(f"first OOM above it ({variant})",
                                   f"batch {oom.batch_size} in the {o.phase}: {o.kind}, asked for "
                                   f"{fmt_bytes(o.request_bytes or 0)}{held}"))
            if sweep.search_ooms.get(variant) is not None:
                ev.append(Evidence(f"search ({variant})", f"{sweep.strategy.get(variant, '?')}, "
                                   f"{sum(1 for x in sweep.trials if x.variant == variant)} trials, "
                                   f"{sweep.search_ooms[variant]} OOM"))
        if on is None and off is None:
            return self.fired("critical", "Batch 1 does not fit, with or without checkpointing", ev,
                              "Even one sequence with recomputation runs out of memory: the model states or the "
                              "loss block exceed the device.",
                              "Shard or offload the optimizer (ZeRO/FSDP, ZeRO-Offload), shorten the sequence, or "
                              "use a chunked loss.", line="batch 1 does not fit, with or without checkpointing")
        if off is None:
            return self.fired("info", f"Checkpointing is required: batch 1 does not fit without it; with it, "
                              f"{at_least}{on} fits", ev,
                              "Without recomputation the activations of one sequence exceed the memory left by "
                              "the model states.", "Keep checkpointing; tune its granularity for speed (GC010).",
                              line=f"checkpointing is required: batch 1 needs it; with it {at_least}{on} fits")
        if on is None:
            return self.inconclusive("the search with checkpointing found no fitting batch")
        gain = on / off
        ev.append(Evidence("gain", gain, "x"))
        if gain < t["min_gain"]:
            return self.fired("warning", f"Checkpointing raises the largest batch only from {off} to {at_least}{on} "
                              f"({gain:.2f}x)", ev,
                              "The recompute is paid on every step but buys little headroom: most memory is "
                              "outside the checkpointed layers (model states, logits and loss).",
                              "See the memory-saving and model-states verdicts; consider sharding/offloading "
                              "optimizer states or a chunked cross-entropy instead.",
                              line=f"largest batch only {off} -> {at_least}{on} with checkpointing ({gain:.2f}x)")
        return self.passed(f"Checkpointing raises the largest batch from {off} to {at_least}{on} ({gain:.1f}x)", ev,
                           line=f"largest batch {off} -> {at_least}{on} with layer checkpointing ({gain:.1f}x)")
