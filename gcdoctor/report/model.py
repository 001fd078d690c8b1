"""The report model: a declarative table of sections that every writer reads.

A `Section` says which facts it shows: its headline numbers (`keys`), its tables (typed columns with
units, rows computed from the facts), its plots (HTML only) and which verdicts belong to it (by
topic). The Markdown, HTML and compare writers render any section from its entry alone, so a new
probe adds one entry to `gcdoctor.report.sections.SECTIONS`, not a writer per format.

Cells hold raw values (numbers, text, None); a column's `unit` decides how every writer shows them
(`format_value`), and compare uses the same unit to say how two values differ. No writer computes a
derived number: each one is computed once, in the facts, a rule, or the row function of its table.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Sequence

from gcdoctor.facts import Facts
from gcdoctor.units import fmt_bytes

GIB, MIB = 2**30, 2**20
DASH = "—"

# units a column may have, and how a value of it is shown
UNITS = ("", "text", "int", "ms", "us", "s", "bytes", "pct", "pct+", "share", "tok/s", "GB/s", "x", "TFLOP/s",
         "sci")


@dataclass(frozen=True)
class Column:
    header: str
    unit: str = ""  # one of UNITS; "" and "text" are shown as they are
    key: bool = False  # the column identifies the row (compare joins rows of A and B on the key columns)
    compare: bool = False  # compare shows this column's values side by side (with the change)
    predicted: bool = False  # a prediction or what-if, not a measurement: compare reports a change, never gates on it

    def __post_init__(self) -> None:
        if self.unit not in UNITS:
            raise ValueError(f"unknown unit {self.unit!r} of column {self.header!r}")


@dataclass(frozen=True)
class Table:
    id: str
    columns: Sequence[Column]
    rows: Callable[[Facts], list[list[Any]]]
    title: str = ""  # "" for a section's main table
    caption: str = ""
    fold: bool = False  # folded away in HTML (details); Markdown shows it under its title

    def key_of(self, row: Sequence[Any]) -> str:
        keys = [str(row[i]) for i, c in enumerate(self.columns) if c.key and i < len(row)]
        return " ".join(keys) if keys else str(row[0])


@dataclass(frozen=True)
class Key:
    """A headline number of a section: a label, a value and its unit (or a text)."""

    id: str
    label: str
    value: Any
    unit: str = "text"
    compare: bool = True
    predicted: bool = False  # a prediction, not a measurement (see Column.predicted)


Plots = Callable[[Facts, "Path | None"], list[tuple[str, str]]]  # [(svg, caption)], HTML only


def _none(facts: Facts) -> list:
    return []


@dataclass(frozen=True)
class Section:
    id: str
    title: str
    present: Callable[[Facts], bool]
    facts: str = ""  # the facts it reads, dotted ("sweep", "memory_model"): documented, and shown when absent
    lead: Callable[[Facts], str] = lambda f: ""
    keys: Callable[[Facts], list[Key]] = _none
    tables: Callable[[Facts], list[Table]] = _none  # a callable: some sections have a table per group
    plots: Plots = lambda f, run_dir: []
    notes: Callable[[Facts], list[str]] = _none
    topics: Sequence[str] = field(default_factory=tuple)  # the verdicts that belong here, by Verdict.topic
    wide_plots: bool = False  # plots over time, one per row at full width (a timeline)


def format_value(v: Any, unit: str = "") -> str:
    """One value as every writer shows it."""
    if v is None or (isinstance(v, float) and not math.isfinite(v)):
        return DASH
    if isinstance(v, bool):
        return "yes" if v else "no"
    if isinstance(v, str) or unit in ("", "text"):
        if isinstance(v, float):
            return f"{v:,.3g}" if abs(v) < 100 else f"{v:,.0f}"
        if isinstance(v, int):
            return f"{v:,}"
        return str(v)
    x = float(v)
    if unit == "int":
        return f"{int(round(x)):,}"
    if unit == "bytes":
        return fmt_bytes(x)
    if unit == "pct":
        return f"{x:.1f}%"
    if unit == "pct+":
        return f"{x:+.1f}%"
    if unit == "share":
        return f"{100 * x:.1f}%"
    if unit == "x":
        return f"{x:.2f}x"
    if unit == "sci":
        return "0" if x == 0 else f"{x:.3g}"
    digits = 2 if abs(x) < 10 else 1
    if unit == "tok/s":
        return f"{x:,.0f}"
    if unit == "ms":
        return f"{x:,.{digits}f}"
    if unit == "us":
        return f"{x:,.{digits}f}"
    if unit == "s":
        return f"{x:,.2f}"
    if unit in ("GB/s", "TFLOP/s"):
        return f"{x:,.{digits}f}"
    return f"{x:,.{digits}f}"


SHOWN_UNIT = {"ms": "ms", "us": "µs", "s": "s", "tok/s": "tok/s", "GB/s": "GB/s", "TFLOP/s": "TFLOP/s"}


def format_with_unit(v: Any, unit: str = "") -> str:
    """A value standing alone (a headline number, a compared metric): with its unit where the number
    does not carry it."""
    text = format_value(v, unit)
    u = SHOWN_UNIT.get(unit)
    return f"{text} {u}" if u and text != DASH else text


def header_of(c: Column) -> str:
    """A column header with its unit where the values do not carry it."""
    unit = SHOWN_UNIT.get(c.unit)
    return f"{c.header} ({unit})" if unit and unit not in c.header else c.header


def numeric(c: Column) -> bool:
    return c.unit not in ("", "text")


def change(a: Any, b: Any, unit: str) -> str:
    """How B differs from A, in words a reader cannot misread: a ratio for amounts, a difference in
    points for percentages and shares, 'same'/'differs' for text. Never 'unchanged' for a move."""
    if a is None and b is None:
        return DASH
    if a is None:
        return "not measured in A"
    if b is None:
        return "not measured in B"
    if unit in ("", "text") or isinstance(a, str) or isinstance(b, str):
        return "same" if a == b else "differs"
    a, b = float(a), float(b)
    if unit in ("pct", "pct+"):
        return "same" if a == b else f"{b - a:+.1f} pp"
    if unit == "share":
        return "same" if a == b else f"{100 * (b - a):+.1f} pp"
    if a == b:
        return "same"
    if a == 0:
        return "differs"
    return f"{b / a:.2f}x"


def drop_empty_columns(t: Table, rows: list[list[Any]]) -> tuple[list[Column], list[list[Any]]]:
    """Columns without a value in any row (device metrics of a CPU run) are left out; keys stay."""
    keep = [i for i, c in enumerate(t.columns)
            if c.key or i == 0 or any(i < len(r) and r[i] not in (None, "") for r in rows)]
    return [t.columns[i] for i in keep], [[r[i] if i < len(r) else None for i in keep] for r in rows]
