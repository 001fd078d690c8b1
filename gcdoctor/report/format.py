"""Number formatting and plain tables shared by the Markdown and console writers."""
from __future__ import annotations

from typing import Any, Sequence

GIB = 2**30


def gib(n: float | int | None, digits: int = 2) -> str:
    return "—" if n is None else f"{n / GIB:.{digits}f}"


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


# -- escaping, one function per sink (HTML: gcdoctor.report.svg.esc) ----------------------------
# C0 controls but tab and newline, DEL, the C1 controls (0x9b is a one-byte CSI on some terminals)
# and the bidirectional overrides and isolates (text that reads differently from what it is)
_CONTROL = {c: None for c in [*range(32), *range(0x7F, 0xA0), 0x2028, 0x2029, *range(0x202A, 0x202F),
                              *range(0x2066, 0x206A)] if c not in (9, 10)}


def term_safe(text: object) -> str:
    """Text for the terminal (console, one-line errors, the TUI): control characters (ESC
    sequences included), C1 controls and bidi overrides dropped."""
    return str(text).translate(_CONTROL)


term_escape = term_safe  # the name the platform code used first


def md_fence(text: str, info: str = "") -> str:
    """A fenced code block that no line of `text` can close: the fence is one backtick longer
    than the longest run of backticks inside (CommonMark), so a name holding "```" and a newline
    cannot break out of the block and have the rest rendered as Markdown or HTML."""
    import re
    longest = max((len(m) for m in re.findall(r"`+", text)), default=0)
    fence = "`" * max(3, longest + 1)
    return f"{fence}{info}\n{term_safe(text)}\n{fence}"


def md_escape(text: str) -> str:
    """Text for Markdown: inert (no raw HTML, no link or image syntax, no control characters)."""
    s = " ".join(term_safe(text).split("\n"))  # one line: no heading, fence or list can start inside it
    for a, b in (("&", "&amp;"), ("<", "&lt;"), (">", "&gt;"), ("[", "\\["), ("]", "\\]"), ("`", "\\`")):
        s = s.replace(a, b)
    return s
