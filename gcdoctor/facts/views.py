"""Comparison views on the facts: numbers derived from recorded measurements, computed here once and
read by rules and report sections alike. A view judges nothing: thresholds live in the rules.
"""
from __future__ import annotations

from dataclasses import dataclass

from typing import TYPE_CHECKING, Any

from gcdoctor.facts.sweep import Measurement, SweepFacts

if TYPE_CHECKING:
    from gcdoctor.facts import Facts


def change_pct(new: float | int | None, base: float | int | None) -> float | None:
    """`new` against `base` in percent (+25: a quarter more); None when either is missing or base is 0."""
    if new is None or not base:
        return None
    return 100.0 * (new / base - 1.0)


def memory_limit_bytes(facts: Facts, config: dict[str, Any] | None = None) -> int | None:
    """The --memory-limit in force (bytes): the run's settings, else its config.json (`config`, for
    runs recorded before the settings held it); None when no limit was given."""
    lim = facts.settings.memory_limit_bytes
    if not lim and isinstance(config, dict):
        lim = config.get("memory_limit_bytes")
    return lim if isinstance(lim, int) and not isinstance(lim, bool) and lim > 0 else None


def spread_pct(times: list[float]) -> float:
    """Step-to-step spread: (max - min) over the median, in percent (0 with fewer than two steps)."""
    if len(times) < 2:
        return 0.0
    mid = sorted(times)[len(times) // 2]
    return 100.0 * (max(times) - min(times)) / mid if mid else 0.0


@dataclass(frozen=True)
class EqualBatch:
    """Checkpointing off and on at the same batch (same sequence, dtype, optimizer): the fair comparison."""
    batch: int
    off: Measurement
    on: Measurement

    @property
    def overhead_pct(self) -> float | None:
        """Checkpointing's step-time overhead."""
        return change_pct(self.on.step_ms_median, self.off.step_ms_median)

    @property
    def activation_saving_pct(self) -> float | None:
        """The share of the activation memory checkpointing saved."""
        a_off, a_on = self.off.activation_peak_bytes, self.on.activation_peak_bytes
        if a_off is None or a_on is None or a_off <= 0:
            return None
        return 100.0 * (1.0 - a_on / a_off)

    @property
    def peak_saving_pct(self) -> float | None:
        """The share of the whole peak saved (diluted by the model states)."""
        p_off, p_on = self.off.peak_allocated_bytes, self.on.peak_allocated_bytes
        return 100.0 * (1.0 - p_on / p_off) if p_off and p_on is not None else None

    @property
    def spread_pct(self) -> float:
        """The larger step-to-step spread of the two."""
        return max(spread_pct(self.off.step_ms), spread_pct(self.on.step_ms))


def equal_batch(sweep: SweepFacts | None) -> EqualBatch | None:
    """The largest batch measured with and without checkpointing, or None."""
    if sweep is None:
        return None
    common = sweep.common_batches()
    if not common:
        return None
    b = common[-1]
    off, on = sweep.get("no_gc", b), sweep.get("gc", b)
    if off is None or on is None:
        return None
    return EqualBatch(b, off, on)
