"""Facts of a watched user training run (gcdoctor.watch / the Trainer callback)."""
from __future__ import annotations

import statistics
from dataclasses import dataclass, field


@dataclass
class WatchStep:
    index: int
    step_ms: float | None = None  # device time from the previous step's end to this one's (events), or synced wall
    peak_allocated_bytes: int | None = None
    peak_reserved_bytes: int | None = None
    loss: float | None = None
    t_start: float | None = None  # time.monotonic(), the telemetry clock
    t_end: float | None = None
    profiled: bool = False


@dataclass
class WatchFacts:
    """Per-step records of the user's own job, as measured by the watcher."""

    model_name: str | None = None
    n_params: int | None = None
    param_dtype: str | None = None
    gradient_checkpointing: bool | None = None  # what the model reports, where it does
    timing: str = "events"  # events (no synchronisation) | sync (synchronised wall clock) | host
    tokens_per_step: int | None = None
    steps: list[WatchStep] = field(default_factory=list)
    profiled_steps: list[int] = field(default_factory=list)
    overhead_note: str = ""
    notes: list[str] = field(default_factory=list)

    def step_times(self, skip_profiled: bool = True, skip_first: int = 1) -> list[float]:
        return [s.step_ms for s in self.steps[skip_first:]
                if s.step_ms is not None and not (skip_profiled and s.profiled)]

    @property
    def step_ms_median(self) -> float | None:
        xs = self.step_times()
        return statistics.median(xs) if xs else None

    @property
    def peak_allocated_bytes(self) -> int | None:
        xs = [s.peak_allocated_bytes for s in self.steps if s.peak_allocated_bytes is not None]
        return max(xs) if xs else None
