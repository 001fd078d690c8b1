"""Building blocks of report.html: escaped tables, key-value lists, figures, sections.

Every value that reaches the page passes through `esc` (quotes included). Helpers that accept
`Raw` trust it as already-built markup; nothing from facts is ever wrapped in Raw unescaped.
"""
from __future__ import annotations

from typing import Any, Iterable, Sequence

from gcdoctor.report.svg import esc

MIB = 2**20
DASH = "—"


class Raw(str):
    """Markup built by this package (already escaped): inserted as is."""


def cell(v: Any) -> str:
    return str(v) if isinstance(v, Raw) else esc(DASH if v is None else v)


def _empty(v: Any) -> bool:
    return v is None or v == "" or v == DASH


def table(headers: Sequence[Any], rows: Iterable[Sequence[Any]], css: str = "", numeric_from: int = 1,
          ids: Sequence[str] | None = None, drop_empty: bool = False) -> Raw:
    """A table; columns from `numeric_from` on are right-aligned. `ids` names the rows (data-row).
    With `drop_empty`, columns without a value in any row (device metrics on a CPU) are left out."""
    rows = [list(r) for r in rows]
    if drop_empty and rows:
        keep = [i for i in range(len(headers)) if i == 0 or any(not _empty(r[i]) for r in rows if i < len(r))]
        headers = [headers[i] for i in keep]
        rows = [[r[i] for i in keep if i < len(r)] for r in rows]
    head = "".join(f"<th>{esc(h)}</th>" for h in headers)
    body = []
    for i, r in enumerate(rows):
        tds = "".join(f'<td class="{"num" if j >= numeric_from else "txt"}">{cell(v)}</td>' for j, v in enumerate(r))
        rid = f' data-row="{esc(ids[i])}"' if ids and i < len(ids) else ""
        body.append(f"<tr{rid}>{tds}</tr>")
    cls = f' class="{esc(css)}"' if css else ""
    return Raw(f'<div class="table-wrap"><table{cls}><thead><tr>{head}</tr></thead>'
               f'<tbody>{"".join(body)}</tbody></table></div>')


def kv(rows: Iterable[tuple[Any, Any]], css: str = "kv") -> Raw:
    items = "".join(f"<tr><th>{cell(k)}</th><td>{cell(v)}</td></tr>" for k, v in rows)
    return Raw(f'<div class="table-wrap"><table class="{esc(css)}"><tbody>{items}</tbody></table></div>')


def figure(svg: str, caption: str) -> Raw:
    if not svg:
        return Raw("")
    return Raw(f'<figure class="plot-figure">{svg}<figcaption>{esc(caption)}</figcaption></figure>')


def figures(*figs: str) -> Raw:
    figs = tuple(f for f in figs if f)
    return Raw(f'<div class="figures">{"".join(figs)}</div>') if figs else Raw("")


def section(sid: str, title: str, *parts: str, lead: str = "") -> Raw:
    body = "".join(p for p in parts if p)
    lead_html = f'<p class="lead">{esc(lead)}</p>' if lead else ""
    return Raw(f'<section id="{esc(sid)}"><h2>{esc(title)}</h2>{lead_html}{body}</section>')


def para(text: str, css: str = "") -> Raw:
    cls = f' class="{esc(css)}"' if css else ""
    return Raw(f"<p{cls}>{esc(text)}</p>") if text else Raw("")


def details(summary: str, *parts: str) -> Raw:
    body = "".join(p for p in parts if p)
    return Raw(f"<details><summary>{esc(summary)}</summary>{body}</details>") if body else Raw("")
