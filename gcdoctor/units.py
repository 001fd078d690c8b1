"""One formatter for sizes, shared by every writer (console, Markdown, HTML, plan, verdict evidence).

Sizes are binary (GiB, MiB, KiB: what torch's allocator and its OOM messages count in), in the largest
unit that keeps the number at 1 or more, so a small size never reads "0.0783 GiB" or "3.73e-09 GiB".
The TUI's live gauges stay in decimal GB, the unit NVML and nvidia-smi users read beside it
(gcdoctor.tui.render.fmt_bytes).
"""
from __future__ import annotations

KIB, MIB, GIB = 2**10, 2**20, 2**30


def fmt_bytes(n: float | int, gib_digits: int = 2) -> str:
    """'105.96 GiB', '80.2 MiB', '12.0 KiB', '512 B' (GiB with `gib_digits` decimals)."""
    a = abs(n)
    if a >= GIB:
        return f"{n / GIB:,.{gib_digits}f} GiB"
    if a >= MIB:
        return f"{n / MIB:,.1f} MiB"
    if a >= KIB:
        return f"{n / KIB:,.1f} KiB"
    return f"{int(round(n)):,} B"


def fmt_gib_value(v: float, gib_digits: int | None = None) -> str:
    """A value already in GiB (verdict evidence): below 1 GiB in MiB, KiB or bytes; else as given."""
    if v != 0 and abs(v) < 1:
        return fmt_bytes(v * GIB)
    if gib_digits is None:
        return f"{v:,.3g} GiB" if abs(v) < 100 else f"{v:,.0f} GiB"
    return f"{v:,.{gib_digits}f} GiB"





def cost_words(pct: float, space: str = " ", only: bool = False, sign: bool = True) -> str:
    """'costs +23 %' for a slowdown, 'saves 8 %' for a speed-up: never 'costs -8 %'."""
    v = int(round(pct))
    if v < 0:
        return f"saves {-v}{space}%"
    return f"costs {'only ' if only else ''}{v:{'+' if sign else ''}d}{space}%"
__all__ = ["GIB", "KIB", "MIB", "cost_words", "fmt_bytes", "fmt_gib_value"]
