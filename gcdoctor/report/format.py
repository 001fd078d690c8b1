"""Number formatting and plain tables shared by the Markdown and console writers."""
from __future__ import annotations

from typing import Any, Sequence

GIB = 2**30


def gib(n: float | int | None, digits: int = 2) -> str:
    return "—" if n is None else f"{n / GIB:.{digits}f}"


def num(x: float | int | None, digits: int = 1, suffix: str = "") -> str:
    if x is None:
        return "—"
    if isinstance(x, int):
        return f"{x:,}{suffix}"
    return f"{x:,.{digits}f}{suffix}"


def pct(x: float | None, digits: int = 0) -> str:
    return "—" if x is None else f"{x:+.{digits}f}%"


def md_table(headers: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    def cell(v: Any) -> str:
        return str(v).replace("|", "\\|").replace("\n", " ")
    out = ["| " + " | ".join(cell(h) for h in headers) + " |", "|" + "---|" * len(headers)]
    out += ["| " + " | ".join(cell(v) for v in r) + " |" for r in rows]
    return "\n".join(out)


def text_table(headers: Sequence[str], rows: Sequence[Sequence[Any]]) -> str:
    cols = [list(map(str, c)) for c in zip(headers, *rows)] if rows else [[h] for h in headers]
    widths = [max(len(v) for v in c) for c in cols]
    lines = ["  ".join(str(h).rjust(w) for h, w in zip(headers, widths))]
    lines += ["  ".join(str(v).rjust(w) for v, w in zip(r, widths)) for r in rows]
    return "\n".join(lines)


_CONTROL = {c: None for c in range(32) if c not in (9, 10)}
_CONTROL[127] = None


def term_safe(text: str) -> str:
    """Text for the terminal: control characters (ESC sequences included) dropped."""
    return str(text).translate(_CONTROL)


def md_escape(text: str) -> str:
    """Text for Markdown: inert (no raw HTML, no link or image syntax, no control characters)."""
    s = term_safe(text)
    for a, b in (("&", "&amp;"), ("<", "&lt;"), (">", "&gt;"), ("[", "\\["), ("]", "\\]")):
        s = s.replace(a, b)
    return s
