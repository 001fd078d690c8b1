"""Facts of the offload probe (issue 6)."""
from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class OffloadFacts:
    notes: list[str] = field(default_factory=list)
