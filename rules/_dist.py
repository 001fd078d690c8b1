"""Shared reading of a distributed run's facts for the sharding rules (GC060-GC063)."""
from __future__ import annotations

from gcdoctor.facts import Facts
from gcdoctor.facts.distributed import CommMetrics, DistributedFacts, RankMeasurement

DTYPE_BYTES = {"bf16": 2, "fp16": 2, "fp32": 4}
STRATEGY = {"fsdp2": "FSDP2", "zero3": "DeepSpeed ZeRO-3"}


def setup(d: DistributedFacts) -> str:
    """The user's sharded setup in words: 'FSDP2 over 2 ranks (reshard_after_forward=True)'."""
    name = STRATEGY.get(d.strategy, d.strategy)
    extra = f" (reshard_after_forward={d.reshard_after_forward})" if d.strategy == "fsdp2" else ""
    return f"{name} over {d.world_size} rank{'s' if d.world_size != 1 else ''}{extra}"


def sweep_rows(facts: Facts) -> tuple[str, int, list[RankMeasurement]] | None:
    """Every rank's row of the sweep's fairest point: the largest batch both variants fit, with
    checkpointing (else without); else any fitting point of the sweep."""
    d, s = facts.distributed, facts.sweep
    if d is None or s is None:
        return None
    common = s.common_batches()
    candidates = ([("gc", common[-1]), ("no_gc", common[-1])] if common else []) + [
        (m.variant, m.batch_size) for m in s.measurements if m.fits and m.step_ms_median]
    for variant, batch in candidates:
        rows = [r for r in d.rows("sweep", variant, batch) if r.fits]
        if rows:
            return variant, batch, rows
    return None


def worst(rows: list[CommMetrics], attr: str) -> CommMetrics | None:
    """The rank whose `attr` is largest (the one the others wait for), among those that have it."""
    have = [c for c in rows if getattr(c, attr) is not None]
    return max(have, key=lambda c: getattr(c, attr)) if have else None


def per_step(x: float) -> str:
    return f"{x:g}" if x == int(x) else f"{x:.1f}"


def size(n: int | float | None) -> str:
    """Bytes as a person reads them: GiB from 1 GiB, MiB below."""
    if n is None:
        return "unknown"
    return f"{n / 2**30:.2f} GiB" if abs(n) >= 2**30 else f"{n / 2**20:.1f} MiB"
