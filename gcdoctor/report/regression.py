"""`compare --fail-on-regression PCT` and `compare --json`: which of B's numbers are worse than A's.

A metric has a direction only where better is unambiguous: step time and peak or activation
memory (lower is better), tokens/s and the largest batch (higher is better). Every other row is
shown but never judged a regression. A prediction or what-if (the memory model's largest batch, a
launch-cost what-if) is never a regression either: the gate compares what was measured, and a
changed prediction is reported (`prediction_changes`) beside it.
"""
from __future__ import annotations

from typing import Any

# label prefix -> +1 where higher is worse, -1 where lower is worse
DIRECTIONS = (("step time", +1), ("peak allocated", +1), ("activation memory", +1), ("tokens/s", -1),
              ("largest batch", -1))


def direction(label: str) -> int:
    for prefix, d in DIRECTIONS:
        if label.startswith(prefix):
            return d
    return 0


def _number(v: Any) -> float | None:
    return float(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else None


def moved(rows: list[Any], pct: float) -> list[dict[str, Any]]:
    """Measured rows with a direction where B differs from A by more than `pct` percent (of A's
    value): `worse_pct` > 0 is a regression, < 0 an improvement. Predictions are left out."""
    out = []
    for r in rows:
        d = direction(r.label)
        a, b = _number(r.a), _number(r.b)
        if not d or a is None or b is None or a <= 0 or getattr(r, "note", None) or getattr(r, "predicted", False):
            continue
        worse = d * (b - a) / a * 100.0
        if abs(worse) > pct:
            out.append({"group": r.group, "label": r.label, "a": a, "b": b, "unit": getattr(r, "unit", ""),
                        "worse_pct": round(worse, 2)})
    return out


def regressions(rows: list[Any], pct: float | None) -> list[dict[str, Any]]:
    """Measured rows where B is worse than A by more than `pct` percent (of A's value)."""
    if pct is None:
        return []
    return [{k: v for k, v in m.items() if k != "unit"} for m in moved(rows, pct) if m["worse_pct"] > 0]


def prediction_changes(rows: list[Any]) -> list[dict[str, Any]]:
    """Predicted rows whose value differs between A and B: reported, never gated on."""
    return [{"group": r.group, "label": r.label, "a": r.a, "b": r.b} for r in rows
            if getattr(r, "predicted", False) and r.a is not None and r.b is not None and r.a != r.b]
