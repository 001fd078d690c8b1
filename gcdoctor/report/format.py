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


def text_table(headers: Sequence[str], rows: Sequence[Sequence[Any]], left: Sequence[int] = ()) -> str:
    """Columns two spaces apart, right-aligned (numbers) but the indices in `left` (names)."""
    cols = [list(map(str, c)) for c in zip(headers, *rows)] if rows else [[h] for h in headers]
    widths = [max(len(v) for v in c) for c in cols]

    def line(r: Sequence[Any]) -> str:
        return "  ".join(str(v).ljust(w) if i in left else str(v).rjust(w)
                         for i, (v, w) in enumerate(zip(r, widths))).rstrip()
    return "\n".join([line(headers)] + [line(r) for r in rows])


def fit_table(headers: Sequence[str], rows: Sequence[Sequence[Any]], width: int, indent: str = "  ",
              drop: Sequence[str] = (), left: Sequence[int] = ()) -> tuple[list[str], list[str]]:
    """A text table within `width` columns: whole cells always, never a word cut. Where it is too wide,
    the columns named in `drop` are left out in that order until it fits; the caller says which
    (the second value). Where even that is too wide, each row becomes a block of `header: value`
    lines, wrapped."""
    import textwrap
    keep = list(range(len(headers)))
    dropped: list[str] = []
    for name in [None, *drop]:
        if name is not None and name in headers:
            keep.remove(list(headers).index(name))
            dropped.append(name)
        lines = text_table([headers[i] for i in keep], [[r[i] for i in keep] for r in rows],
                           left=[k for k, i in enumerate(keep) if i in left]).splitlines()
        if max(len(indent + x) for x in lines) <= width:
            return [indent + x for x in lines], dropped
    out: list[str] = []
    for r in rows:
        for i, (h, v) in enumerate(zip(headers, r)):
            out += textwrap.wrap(f"{h}: {v}", width, initial_indent=indent if i == 0 else indent + "  ",
                                 subsequent_indent=indent + "    ", break_on_hyphens=False)
    return out, []


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
