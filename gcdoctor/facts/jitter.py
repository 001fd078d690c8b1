"""Facts of the jitter probe (issue 7)."""
from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class JitterFacts:
    notes: list[str] = field(default_factory=list)
