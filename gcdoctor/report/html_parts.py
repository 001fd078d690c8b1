"""Building blocks of report.html: escaped tables, key-value lists, figures, unit-aware numbers.

Every value that reaches the page passes through `esc` (quotes included). Helpers that accept
`Raw` trust it as already-built markup; nothing from facts is ever wrapped in Raw unescaped.
"""
from __future__ import annotations

import dataclasses
import math
from typing import Any, Iterable, Sequence

from gcdoctor.report.format import GIB
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


def bullets(items: Iterable[str], css: str = "") -> Raw:
    items = [i for i in items if i]
    if not items:
        return Raw("")
    cls = f' class="{esc(css)}"' if css else ""
    return Raw(f"<ul{cls}>" + "".join(f"<li>{esc(i)}</li>" for i in items) + "</ul>")


def details(summary: str, *parts: str) -> Raw:
    body = "".join(p for p in parts if p)
    return Raw(f"<details><summary>{esc(summary)}</summary>{body}</details>") if body else Raw("")


# numbers -----------------------------------------------------------------------------------
def fnum(x: float | int | None, digits: int = 1) -> str:
    if x is None or (isinstance(x, float) and not math.isfinite(x)):
        return DASH
    if isinstance(x, bool):
        return "yes" if x else "no"
    if isinstance(x, int):
        return f"{x:,}"
    if x != 0 and abs(x) < 10 ** -digits:
        return f"{x:.{max(digits, 1)}g}" if abs(x) >= 1e-4 else f"{x:.2e}"
    return f"{x:,.{digits}f}"


def fbytes(n: float | int | None) -> str:
    """Bytes in GiB, or MiB below 1 GiB (the CPU runs are small)."""
    if n is None:
        return DASH
    if abs(n) >= GIB:
        return f"{n / GIB:,.2f} GiB"
    return f"{n / MIB:,.1f} MiB"


def fpct(x: float | None, digits: int = 1, signed: bool = False) -> str:
    if x is None:
        return DASH
    return f"{x:+.{digits}f}%" if signed else f"{x:.{digits}f}%"


def fshare(x: float | None, digits: int = 1) -> str:
    return DASH if x is None else f"{100 * x:.{digits}f}%"


def fratio(a: float | None, b: float | None) -> str:
    if a is None or b is None or a == 0:
        return DASH
    return f"{b / a:.2f}x"


def by_unit(name: str, v: Any) -> str:
    """Format a facts value by the unit in its field name (_bytes, _ms, _us, _pct, _share, _gbs ...)."""
    if v is None:
        return DASH
    if isinstance(v, bool):
        return "yes" if v else "no"
    if isinstance(v, (list, tuple)):
        if all(isinstance(x, (int, float)) and not isinstance(x, bool) for x in v):
            if len(v) > 6:
                return f"{len(v)} values, {fnum(min(v), 3)}…{fnum(max(v), 3)}"
            return ", ".join(by_unit(name, x) for x in v)
        return ", ".join(str(x) for x in v)
    if isinstance(v, dict):
        return ", ".join(f"{k}: {by_unit(name, x)}" for k, x in v.items())
    if not isinstance(v, (int, float)):
        return str(v)
    n = name.lower()
    if n.endswith("_bytes") or n == "bytes":
        return fbytes(v)
    if n.endswith("_pct"):
        return fpct(float(v))
    if n.endswith("_share") or n == "mfu":
        return fshare(float(v))
    if n.endswith("_ms") or "_ms_" in n:
        return f"{fnum(float(v), 2 if abs(v) < 10 else 1)} ms"
    if n.endswith("_us") or "_us_" in n:
        return f"{fnum(float(v), 2 if abs(v) < 10 else 1)} µs"
    if n.endswith("_gbs"):
        return f"{fnum(float(v), 2)} GB/s"
    if n.endswith("_s"):
        return f"{fnum(float(v), 2)} s"
    if n.endswith("_hz"):
        return f"{fnum(float(v), 1)} Hz"
    if n.endswith("_tflops") or n.endswith("tflops_per_s"):
        return f"{fnum(float(v), 1)} TFLOP/s"
    return fnum(v, 3 if isinstance(v, float) and abs(v) < 10 else 1)


def label_of(name: str) -> str:
    """A field name as a column header: 'step_ms_median' -> 'step ms median'."""
    return name.replace("_", " ")


# generic rendering of a facts section whose shape this writer does not know (yet) ---------------
def _is_scalar(v: Any) -> bool:
    return v is None or isinstance(v, (str, int, float, bool))


def _is_number_list(v: Any) -> bool:
    return isinstance(v, list) and all(isinstance(x, (int, float)) and not isinstance(x, bool) for x in v)


def rows_table(items: Sequence[Any], max_cols: int = 14, skip: Sequence[str] = ()) -> Raw:
    """A list of dataclass instances as a table of their scalar fields that have a value somewhere."""
    items = [i for i in items if dataclasses.is_dataclass(i)]
    if not items:
        return Raw("")
    names = [f.name for f in dataclasses.fields(items[0]) if f.name not in skip]
    cols = [n for n in names if any(_is_scalar(getattr(i, n, None)) and getattr(i, n, None) not in (None, "")
                                    for i in items)]
    cols = [c for c in cols if all(_is_scalar(getattr(i, c, None)) or _is_number_list(getattr(i, c, None))
                                   for i in items)][:max_cols]
    return table([label_of(c) for c in cols], [[by_unit(c, getattr(i, c, None)) for c in cols] for i in items],
                 numeric_from=1)


def generic_block(obj: Any, prefix: str, unavailable: dict[str, str], depth: int = 0) -> Raw:
    """Everything in a dataclass, rendered by shape: scalars as a key-value table, lists of rows as
    tables, nested dataclasses recursively, notes as a list. Missing values show their reason."""
    if obj is None or not dataclasses.is_dataclass(obj):
        return Raw("")
    scalars: list[tuple[str, str]] = []
    parts: list[str] = []
    notes: list[str] = []
    for f in dataclasses.fields(obj):
        v = getattr(obj, f.name)
        path = f"{prefix}.{f.name}"
        if f.name == "notes" and isinstance(v, list):
            notes = [str(x) for x in v]
        elif _is_scalar(v) or _is_number_list(v):
            if v is None and path in unavailable:
                scalars.append((label_of(f.name), f"not measured: {unavailable[path]}"))
            elif v is not None and v != "" and v != []:
                scalars.append((label_of(f.name), by_unit(f.name, v)))
        elif isinstance(v, list) and v and dataclasses.is_dataclass(v[0]):
            nested = [x for x in dataclasses.fields(v[0])
                      if dataclasses.is_dataclass(getattr(v[0], x.name, None))
                      or (isinstance(getattr(v[0], x.name, None), list) and getattr(v[0], x.name)
                          and dataclasses.is_dataclass(getattr(v[0], x.name)[0]))]
            if depth < 2 and nested:
                for i, item in enumerate(v):
                    title = next((str(getattr(item, k)) for k in ("name", "variant", "key", "group")
                                  if isinstance(getattr(item, k, None), str)), f"{f.name}[{i}]")
                    parts.append(f'<h4>{esc(title)}</h4>{generic_block(item, f"{path}[{i}]", unavailable, depth + 1)}')
            else:
                parts.append(f"<h4>{esc(label_of(f.name))}</h4>{rows_table(v)}")
        elif isinstance(v, dict) and v:
            if all(_is_scalar(x) for x in v.values()):
                parts.append(f"<h4>{esc(label_of(f.name))}</h4>"
                             + kv([(k, by_unit(f.name, x)) for k, x in v.items()]))
            elif all(dataclasses.is_dataclass(x) for x in v.values()):
                parts.append(f"<h4>{esc(label_of(f.name))}</h4>" + keyed_rows_table(v))
        elif dataclasses.is_dataclass(v) and depth < 2:
            parts.append(f"<h4>{esc(label_of(f.name))}</h4>{generic_block(v, path, unavailable, depth + 1)}")
    out = kv(scalars) if scalars else ""
    return Raw(out + "".join(parts) + bullets(notes, "notes"))


def keyed_rows_table(d: dict[str, Any], max_cols: int = 12) -> Raw:
    items = list(d.values())
    if not items:
        return Raw("")
    names = [f.name for f in dataclasses.fields(items[0])]
    cols = [n for n in names if any(_is_scalar(getattr(i, n)) and getattr(i, n) not in (None, "") for i in items)]
    cols = [c for c in cols if all(_is_scalar(getattr(i, c)) for i in items)][:max_cols]
    rows = [[k] + [by_unit(c, getattr(i, c)) for c in cols] for k, i in d.items()]
    return table(["key"] + [label_of(c) for c in cols], rows)
