"""Shared reading of the batch sweep for the sweep rules: the fair comparison point."""
from __future__ import annotations

from gcdoctor.facts import Facts, Measurement
from gcdoctor.facts.views import equal_batch

GIB = 2**30


def equal_batch_pair(facts: Facts) -> tuple[int, Measurement, Measurement] | None:
    """The largest batch measured with and without checkpointing (same seq, dtype, optimizer)."""
    eq = equal_batch(facts.sweep)
    return None if eq is None else (eq.batch, eq.off, eq.on)


def gib(n: int | float | None) -> float | None:
    return None if n is None else n / GIB
