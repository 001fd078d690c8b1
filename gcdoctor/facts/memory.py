"""Facts of the analytic memory model's predictions (issue 11)."""
from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class MemoryModelFacts:
    notes: list[str] = field(default_factory=list)
