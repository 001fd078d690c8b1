"""Text building blocks of the TUI: fixed-scale sparklines, bars, and number formats.

Plain functions returning strings, so they are testable without a terminal. Sparklines use a
fixed scale (0..max, e.g. 0-100 % or 0..the link peak) rather than the data's own min/max, as
Textual's Sparkline does: a line that fills the cell must mean "at the limit", not "at the
largest value seen".
"""
from __future__ import annotations

import math
from typing import Sequence

BLOCKS = "▁▂▃▄▅▆▇█"


def sparkline(values: Sequence[float | None], width: int, top: float | None) -> str:
    """The last `width` values as block characters scaled to 0..top; None is a blank cell.

    Left-padded with blanks when there are fewer values than cells. When `top` is unknown
    (None or not positive) the largest value stands in for it.
    """
    if width <= 0:
        return ""
    vals = list(values)[-width:]
    if top is None or top <= 0:
        known = [v for v in vals if v is not None]
        top = max(known) if known else 0.0
    out = []
    for v in vals:
        if v is None or (isinstance(v, float) and math.isnan(v)):
            out.append(" ")
        elif top <= 0:
            out.append(BLOCKS[0])
        else:
            frac = min(1.0, max(0.0, v / top))
            out.append(BLOCKS[min(len(BLOCKS) - 1, int(frac * len(BLOCKS)))])
    return " " * (width - len(out)) + "".join(out)


def bar(fraction: float | None, width: int) -> str:
    """A progress bar of `width` cells; an unknown fraction is a dotted track."""
    if width <= 0:
        return ""
    if fraction is None:
        return "·" * width
    filled = round(min(1.0, max(0.0, fraction)) * width)
    return "█" * filled + "░" * (width - filled)


def fmt_bytes(n: float | None, unit: str | None = None) -> str:
    """Bytes in GB (1e9) by default, the unit NVML and nvidia-smi users read; None -> '—'."""
    if n is None:
        return "—"
    if unit is None:
        unit = "GB" if n >= 1e9 else "MB"
    scale = {"GB": 1e9, "MB": 1e6, "GiB": 2**30}[unit]
    v = n / scale
    return f"{v:.1f} {unit}" if v < 100 else f"{v:.0f} {unit}"


def fmt_pair_bytes(used: float | None, total: float | None) -> str:
    """'12.3/141 GB': used against total in the total's unit."""
    if used is None:
        return "—"
    if total is None:
        return fmt_bytes(used)
    unit = "GB" if total >= 1e9 else "MB"
    scale = 1e9 if unit == "GB" else 1e6
    u, t = used / scale, total / scale
    return f"{u:.1f}/{t:.0f} {unit}" if t >= 10 else f"{u:.2f}/{t:.1f} {unit}"


def fmt_pct(v: float | None) -> str:
    return "—" if v is None else f"{v:.0f}%"


def fmt_gbs(v: float | None, peak: float | None) -> str:
    if v is None:
        return "—"
    return f"{v:.1f}/{peak:.0f} GB/s" if peak else f"{v:.1f} GB/s"


def fmt_seconds(s: float | None) -> str:
    """Durations for ETAs: '42 s', '3 min 5 s', '1 h 02 min'; None -> '?'."""
    if s is None:
        return "?"
    s = max(0.0, s)
    if s < 60:
        return f"{s:.0f} s" if s >= 10 else f"{s:.1f} s"
    if s < 3600:
        return f"{int(s // 60)} min {int(s % 60):d} s"
    return f"{int(s // 3600)} h {int(s % 3600 // 60):02d} min"


def fmt_ms(ms: float | None) -> str:
    if ms is None:
        return "—"
    return f"{ms / 1000:.1f} s" if ms >= 10_000 else f"{ms:.1f} ms" if ms < 100 else f"{ms:.0f} ms"


def fmt_cell(v: object) -> str:
    """A measurement-table cell: None is an em dash, floats keep what the row rounded them to."""
    if v is None:
        return "—"
    if isinstance(v, bool):
        return "yes" if v else "no"
    if isinstance(v, float):
        return f"{v:,.2f}".rstrip("0").rstrip(".") if abs(v) < 1000 else f"{v:,.0f}"
    if isinstance(v, int):
        return f"{v:,}"
    return str(v)


# a field: (rank, forms). Forms run from the fullest to the shortest; "" as the last form means the
# field may be left out. The highest rank gives way first.
Field = tuple[int, Sequence[str]]


def fit_fields(fields: Sequence[Field], width: int, sep: str = " · ") -> str:
    """Fields joined by `sep` in `width` cells: while the line is too wide, the field of highest rank
    takes its next shorter form (or is left out), so a field is shown whole or not at all. The
    result can still be wider than `width` when even the shortest forms are: `wrap_text` it."""
    chosen = [0] * len(fields)

    def line() -> str:
        return sep.join(t for (_, forms), i in zip(fields, chosen) if (t := forms[i]))

    order = sorted(range(len(fields)), key=lambda k: -fields[k][0])  # stable: later fields first on ties
    for k in order:
        forms = fields[k][1]
        while len(line()) > width and chosen[k] < len(forms) - 1:
            chosen[k] += 1
        if len(line()) <= width:
            break
    for k in reversed(order):  # give back what a later cut made room for, the lowest rank first
        while chosen[k] > 0:
            chosen[k] -= 1
            if len(line()) > width:
                chosen[k] += 1
                break
    return line()


def wrap_text(text: str, width: int, fill: bool = False) -> list[str]:
    """`text` over lines of at most `width` cells, broken between words; a word longer than a line
    (a path, a variant name) is broken after '/', ':' or '-', and only at the last resort inside.
    `fill`: every line filled before the next starts, so a short word before a long path stays on
    the path's first line ("report: /home/.../runs/" then the rest)."""
    import re
    import textwrap
    if width <= 0:
        return [text]
    out: list[str] = []
    wrapped = [text] if fill else textwrap.wrap(text, width, break_long_words=False, break_on_hyphens=False)
    for line in wrapped or [""]:
        if len(line) <= width:
            out.append(line)
            continue
        cur = ""
        for part in [p for p in re.split(r"(?<=[/:-])|(?<= )", line) if p]:
            while len(part) > width:  # one piece longer than a line: no place to break it but inside
                if cur:
                    out.append(cur.rstrip())
                    cur = ""
                out.append(part[:width])
                part = part[width:]
            if len(cur) + len(part) > width:
                out.append(cur.rstrip())
                cur = ""
            cur += part
        if cur:
            out.append(cur.rstrip())
    return out
