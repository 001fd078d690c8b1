"""Facts of a watched user training run (issue 10)."""
from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class WatchFacts:
    notes: list[str] = field(default_factory=list)
