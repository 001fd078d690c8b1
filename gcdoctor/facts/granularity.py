"""Facts of the granularity probe and the device launch cost (issue 5)."""
from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class GranularityFacts:
    notes: list[str] = field(default_factory=list)
