"""Shared reading of the batch sweep for the sweep rules: the fair comparison point."""
from __future__ import annotations

from gcdoctor.facts import Facts, Measurement

GIB = 2**30


def equal_batch_pair(facts: Facts) -> tuple[int, Measurement, Measurement] | None:
    """The largest batch measured with and without checkpointing (same seq, dtype, optimizer)."""
    sweep = facts.sweep
    if sweep is None:
        return None
    common = sweep.common_batches()
    if not common:
        return None
    b = common[-1]
    return b, sweep.get("no_gc", b), sweep.get("gc", b)


def gib(n: int | float | None) -> float | None:
    return None if n is None else n / GIB
