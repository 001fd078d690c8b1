"""Shared reading of the granularity probe for GC010 and GC011: the best trade-off of a group,
judged with GC010's thresholds (`best_min_saving_pct`, `best_min_time_added_pct`)."""
from __future__ import annotations

from gcdoctor.facts.granularity import GranularityGroup, GranularityVariant

# The "best trade-off" only considers variants that save at least this share of the activation
# memory of the variant without checkpointing: a saving smaller than this is within what the
# allocator's rounding and transient buffers move between runs, and buys no batch size.
BEST_MIN_SAVING_PCT = 10.0
# Time added below this is counted as this much when dividing memory saved by time added, so a
# variant that is (nearly) free does not win by dividing by noise; ties then go to the larger saving.
BEST_MIN_TIME_ADDED_PCT = 1.0

TRADEOFF_DEFAULTS = {"best_min_saving_pct": BEST_MIN_SAVING_PCT, "best_min_time_added_pct": BEST_MIN_TIME_ADDED_PCT}


def best_tradeoff(group: GranularityGroup, t: dict[str, float] | None = None) -> GranularityVariant | None:
    """The checkpointing variant with the most activation memory saved per percent of step time
    added, among those saving at least `best_min_saving_pct` of the activations; time added below
    `best_min_time_added_pct` counts as that much. None when no variant qualifies."""
    t = {**TRADEOFF_DEFAULTS, **(t or {})}
    min_saving, min_time = t["best_min_saving_pct"], t["best_min_time_added_pct"]
    best, best_key = None, None
    for v in group.variants:
        if v.variant == "none" or not v.fits or v.memory_saved_pct is None or v.time_added_pct is None:
            continue
        if v.memory_saved_pct < min_saving or v.memory_saved_bytes is None:
            continue
        key = (v.memory_saved_bytes / max(v.time_added_pct, min_time), v.memory_saved_bytes)
        if best_key is None or key > best_key:
            best, best_key = v, key
    return best
