"""Inline SVG plots for report.html: plain strings, no plotting library, no network.

Every piece of text that reaches the SVG (series names, labels, titles) goes through `esc`, so a
hostile model or kernel name cannot inject markup. Numbers are formatted here, never taken as text.
"""
from __future__ import annotations

import html
import math
from dataclasses import dataclass, field
from typing import Callable, Sequence

# Okabe-Ito: distinguishable for colour-blind readers and in greyscale print.
PALETTE = ["#0072B2", "#D55E00", "#009E73", "#CC79A7", "#E69F00", "#56B4E9", "#000000", "#F0E442"]
VARIANT_COLORS = {"no_gc": "#D55E00", "gc": "#0072B2", "none": "#D55E00", "layer": "#0072B2"}


def esc(text: object) -> str:
    """HTML/SVG-escape anything (quotes included, so it is safe in attributes too); control
    characters and bidi overrides (text that reads differently from what it is) are dropped."""
    from gcdoctor.report.format import term_safe
    return html.escape("" if text is None else term_safe(text), quote=True)


def color_for(name: str, index: int) -> str:
    return VARIANT_COLORS.get(name) or PALETTE[index % len(PALETTE)]


def colors_for(names: Sequence[str]) -> dict[str, str]:
    """A colour per name: the fixed ones for known variants, unused palette colours for the rest."""
    out = {n: VARIANT_COLORS[n] for n in names if n in VARIANT_COLORS}
    free = [c for c in PALETTE if c not in out.values()] or PALETTE
    for n in names:
        if n not in out:
            out[n] = free[len([k for k in out if k not in VARIANT_COLORS]) % len(free)]
    return out


@dataclass
class Series:
    name: str
    points: list[tuple[float, float]]
    color: str = ""
    dashed: bool = False
    markers: bool = True
    labels: list[str] = field(default_factory=list)  # one per point (scatter labels), optional


@dataclass
class Mark:
    """A single annotated point, e.g. where a variant ran out of memory."""

    x: float
    y: float
    text: str
    color: str = "#B00020"
    shape: str = "cross"  # cross | dot
    dy: float = -7.0  # label offset above (negative) or below (positive) the point


@dataclass
class HLine:
    y: float
    text: str
    color: str = "#777777"


@dataclass
class Band:
    """A shaded x-interval (a training step on the telemetry timeline)."""

    x0: float
    x1: float
    color: str
    opacity: float = 0.15
    title: str = ""


@dataclass
class Frame:
    """Pixel geometry and the data->pixel mapping of one plot."""

    width: int
    height: int
    left: int
    right: int
    top: int
    bottom: int
    x0: float
    x1: float
    y0: float
    y1: float
    x_log2: bool = False

    def _tx(self, x: float) -> float:
        return math.log2(x) if self.x_log2 else x

    def px(self, x: float) -> float:
        a, b = self._tx(self.x0), self._tx(self.x1)
        span = (b - a) or 1.0
        return self.left + (self._tx(x) - a) / span * (self.width - self.left - self.right)

    def py(self, y: float) -> float:
        span = (self.y1 - self.y0) or 1.0
        return self.height - self.bottom - (y - self.y0) / span * (self.height - self.top - self.bottom)


def nice_ticks(lo: float, hi: float, n: int = 5) -> list[float]:
    """Round tick values (1, 2, 2.5, 5 x 10^k steps) covering [lo, hi]."""
    if not (math.isfinite(lo) and math.isfinite(hi)):
        return [0.0]
    if hi <= lo:
        hi = lo + (abs(lo) or 1.0)
    raw = (hi - lo) / max(n, 1)
    mag = 10 ** math.floor(math.log10(raw))
    step = next(m * mag for m in (1, 2, 2.5, 5, 10) if m * mag >= raw)
    start = math.floor(lo / step) * step
    ticks = [round(start, 12)]
    while ticks[-1] < hi - step * 1e-9:
        ticks.append(round(start + len(ticks) * step, 12))
    return ticks


def log2_ticks(lo: float, hi: float) -> list[float]:
    lo_e, hi_e = math.floor(math.log2(max(lo, 1e-12))), math.ceil(math.log2(max(hi, 1e-12)))
    step = max(1, math.ceil((hi_e - lo_e) / 8))
    return [2.0 ** e for e in range(lo_e, hi_e + 1, step)]


def fmt_tick(v: float) -> str:
    if v == 0:
        return "0"
    a = abs(v)
    if a >= 1e6:
        return f"{v / 1e6:g}M"
    if a >= 1e4:
        return f"{v / 1e3:g}k"
    if a >= 1:
        return f"{v:,.{0 if float(v).is_integer() else 1}f}"
    return f"{v:.3g}"


def _f(v: float) -> str:
    return f"{v:.1f}"


def _svg_open(width: int, height: int, title: str, css_class: str = "plot") -> list[str]:
    return [f'<svg class="{esc(css_class)}" xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {width} {height}" '
            f'width="{width}" height="{height}" role="img" aria-label="{esc(title)}">', f"<title>{esc(title)}</title>"]


def _axes(fr: Frame, xticks: Sequence[float], yticks: Sequence[float], x_label: str, y_label: str,
          x_fmt: Callable[[float], str], y_fmt: Callable[[float], str]) -> list[str]:
    out = ['<g class="axes">']
    bottom_y, right_x = fr.height - fr.bottom, fr.width - fr.right
    for t in yticks:
        y = fr.py(t)
        out.append(f'<line class="grid" x1="{fr.left}" y1="{_f(y)}" x2="{right_x}" y2="{_f(y)}"/>')
        out.append(f'<text class="tick" x="{fr.left - 6}" y="{_f(y + 4)}" text-anchor="end">{esc(y_fmt(t))}</text>')
    for t in xticks:
        x = fr.px(t)
        out.append(f'<line class="grid" x1="{_f(x)}" y1="{fr.top}" x2="{_f(x)}" y2="{bottom_y}"/>')
        out.append(f'<text class="tick" x="{_f(x)}" y="{bottom_y + 16}" text-anchor="middle">{esc(x_fmt(t))}</text>')
    out.append(f'<line class="axis" x1="{fr.left}" y1="{bottom_y}" x2="{right_x}" y2="{bottom_y}"/>')
    out.append(f'<line class="axis" x1="{fr.left}" y1="{fr.top}" x2="{fr.left}" y2="{bottom_y}"/>')
    out.append(f'<text class="label" x="{_f((fr.left + right_x) / 2)}" y="{fr.height - 4}" '
               f'text-anchor="middle">{esc(x_label)}</text>')
    out.append(f'<text class="label" transform="translate(12 {_f((fr.top + bottom_y) / 2)}) rotate(-90)" '
               f'text-anchor="middle">{esc(y_label)}</text>')
    out.append("</g>")
    return out


LEGEND_ROW = 16


def _legend_layout(series: Sequence[Series], left: int, right_edge: int) -> list[tuple[Series, float, int]]:
    """(series, x, row) of each legend entry, wrapping onto new rows at the right edge."""
    out: list[tuple[Series, float, int]] = []
    x: float = left + 4
    row = 0
    for s in series:
        if not s.name:
            continue
        w = 28 + 6.5 * len(s.name)
        if x + w > right_edge and x > left + 4:
            x, row = left + 4, row + 1
        out.append((s, x, row))
        x += w
    return out


def _legend(layout: list[tuple[Series, float, int]], first_row_y: float) -> list[str]:
    out = ['<g class="legend">']
    for s, x, row in layout:
        y = first_row_y + row * LEGEND_ROW
        dash = ' stroke-dasharray="5 3"' if s.dashed else ""
        out.append(f'<line x1="{_f(x)}" y1="{_f(y - 4)}" x2="{_f(x + 16)}" y2="{_f(y - 4)}" stroke="{esc(s.color)}" '
                   f'stroke-width="2.5"{dash}/>')
        out.append(f'<text x="{_f(x + 20)}" y="{_f(y)}">{esc(s.name)}</text>')
    out.append("</g>")
    return out


def _tick_formatter(ticks: Sequence[float], fmt: Callable[[float], str]) -> Callable[[float], str]:
    """`fmt`, unless it prints two ticks the same (8.36 and 8.38 as "8.4"): then enough decimals."""
    if len({fmt(t) for t in ticks}) == len(ticks) or len(ticks) < 2:
        return fmt
    step = min(abs(b - a) for a, b in zip(ticks, ticks[1:])) or 1.0
    digits = max(0, -math.floor(math.log10(step)) + 1)
    return lambda v: f"{v:,.{digits}f}"


def _mark(m: Mark, fr: Frame) -> list[str]:
    x, y = fr.px(m.x), fr.py(m.y)
    if m.shape == "cross":
        shape = (f'<path d="M{_f(x - 5)} {_f(y - 5)}L{_f(x + 5)} {_f(y + 5)}M{_f(x - 5)} {_f(y + 5)}'
                 f'L{_f(x + 5)} {_f(y - 5)}" stroke="{esc(m.color)}" stroke-width="2.5"/>')
    else:
        shape = f'<circle cx="{_f(x)}" cy="{_f(y)}" r="4" fill="{esc(m.color)}"/>'
    anchor = "end" if x > fr.width - fr.right - 60 else "start"
    dx = -8 if anchor == "end" else 8
    return [f'<g class="mark">{shape}<text x="{_f(x + dx)}" y="{_f(y + m.dy)}" text-anchor="{anchor}" '
            f'fill="{esc(m.color)}">{esc(m.text)}</text></g>']


def _extent(series: Sequence[Series], marks: Sequence[Mark], hlines: Sequence[HLine], bands: Sequence[Band],
            x_log2: bool, x_range: tuple[float, float] | None,
            y_from_zero: bool) -> tuple[float, float, float, float] | None:
    """(x0, x1, y_lo, y_hi) of everything drawn; None when there is nothing to draw."""
    pts = [p for s in series for p in s.points if _finite(p)]
    if not pts and not marks:
        return None
    xs = [p[0] for p in pts] + [m.x for m in marks] + [b.x0 for b in bands] + [b.x1 for b in bands]
    ys = [p[1] for p in pts] + [m.y for m in marks] + [h.y for h in hlines]
    if x_log2:
        xs = [x for x in xs if x > 0] or [1.0]
    x0, x1 = x_range if x_range else (min(xs), max(xs))
    if x1 <= x0:
        x0, x1 = (x0 / 2, x0 * 2) if x_log2 else (x0 - 1, x1 + 1)
    y_lo, y_hi = min(ys), max(ys)
    if y_from_zero:
        y_lo = min(0.0, y_lo)
    if y_hi <= y_lo:
        y_hi = y_lo + (abs(y_lo) or 1.0)
    return x0, x1, y_lo, y_hi


def _x_ticks(x0: float, x1: float, x_log2: bool,
             x_range: tuple[float, float] | None) -> tuple[list[float], float, float]:
    """The x ticks and the x range widened to them where the ticks lead."""
    if x_log2:
        xticks = log2_ticks(x0, x1)
        return xticks, min(x0, xticks[0]), max(x1, xticks[-1])
    if x_range:
        return [t for t in nice_ticks(x0, x1, 6) if x0 <= t <= x1], x0, x1
    xticks = nice_ticks(x0, x1, 6)  # round ends, so no point sits on the frame's edge
    return xticks, xticks[0], xticks[-1]


def _band(b: Band, fr: Frame) -> str:
    xa, xb = fr.px(max(b.x0, fr.x0)), fr.px(min(b.x1, fr.x1))
    if xb <= xa:
        xb = xa + 0.6
    tip = f"<title>{esc(b.title)}</title>" if b.title else ""
    return (f'<rect class="band" x="{_f(xa)}" y="{fr.top}" width="{_f(xb - xa)}" '
            f'height="{fr.height - fr.top - fr.bottom}" fill="{esc(b.color)}" fill-opacity="{b.opacity:.2f}">'
            f"{tip}</rect>")


def _hline(h: HLine, fr: Frame) -> str:
    y = fr.py(h.y)
    return (f'<g class="hline"><line x1="{fr.left}" y1="{_f(y)}" x2="{fr.width - fr.right}" y2="{_f(y)}" '
            f'stroke="{esc(h.color)}" stroke-dasharray="6 4"/><text x="{fr.left + 6}" '
            f'y="{_f(y - 5)}" text-anchor="start" fill="{esc(h.color)}">{esc(h.text)}</text></g>')


def _points(s: Series, spts: list[tuple[float, float]], fr: Frame, scatter: bool, x_fmt: Callable[[float], str],
            y_fmt: Callable[[float], str], placed: list[tuple[float, float, float, float]]) -> list[str]:
    """A series' point markers with their tooltips (and, in a scatter plot, their labels)."""
    g = [f'<g class="points" fill="{esc(s.color)}">']
    for i, (x, y) in enumerate(spts):
        label = s.labels[i] if i < len(s.labels) else ""
        tip = f"{s.name}: {label + ', ' if label else ''}{x_fmt(x)}, {y_fmt(y)}"
        g.append(f'<circle cx="{_f(fr.px(x))}" cy="{_f(fr.py(y))}" r="{4 if scatter else 3}">'
                 f"<title>{esc(tip)}</title></circle>")
        if scatter and label:
            lx, ly, anchor = _place_label(fr.px(x), fr.py(y), label, placed, fr)
            g.append(f'<text class="point-label" x="{_f(lx)}" y="{_f(ly)}" text-anchor="{anchor}">'
                     f"{esc(label)}</text>")
    g.append("</g>")
    return g


def _series(s: Series, fr: Frame, scatter: bool, x_fmt: Callable[[float], str], y_fmt: Callable[[float], str],
            placed: list[tuple[float, float, float, float]]) -> list[str]:
    """One series: its line (sorted by x; none in a scatter plot) and its points."""
    spts = [p for p in s.points if _finite(p)]
    if not scatter:
        spts.sort(key=lambda p: p[0])
    if not spts:
        return []
    out = []
    dash = ' stroke-dasharray="6 4"' if s.dashed else ""
    if not scatter and len(spts) > 1:
        d = "M" + "L".join(f"{_f(fr.px(x))} {_f(fr.py(y))}" for x, y in spts)
        out.append(f'<path class="series" d="{d}" fill="none" stroke="{esc(s.color)}" stroke-width="2"{dash}>'
                   f"<title>{esc(s.name)}</title></path>")
    if s.markers or scatter or len(spts) == 1:
        out += _points(s, spts, fr, scatter, x_fmt, y_fmt, placed)
    return out


def line_plot(series: Sequence[Series], *, title: str, x_label: str, y_label: str, x_log2: bool = False,
              marks: Sequence[Mark] = (), hlines: Sequence[HLine] = (), bands: Sequence[Band] = (),
              y_from_zero: bool = True, width: int = 540, height: int = 300,
              x_fmt: Callable[[float], str] = fmt_tick, y_fmt: Callable[[float], str] = fmt_tick,
              x_range: tuple[float, float] | None = None, scatter: bool = False) -> str:
    """A line (or scatter) plot with optional OOM marks, reference lines and shaded bands.

    Returns "" when there is nothing to draw, so callers can skip the figure.
    """
    extent = _extent(series, marks, hlines, bands, x_log2, x_range, y_from_zero)
    if extent is None:
        return ""
    x0, x1, y_lo, y_hi = extent
    yticks = nice_ticks(y_lo, y_hi + 0.08 * (y_hi - y_lo))
    xticks, x0, x1 = _x_ticks(x0, x1, x_log2, x_range)
    show_legend = not (scatter and len(series) == 1)
    layout = _legend_layout(series, 62, width - 18) if show_legend else []
    rows = 1 + max((r for _, _, r in layout), default=0)
    top = 12 + LEGEND_ROW * rows if layout else 16
    height += top - 28  # the plot area keeps its size however many legend rows there are
    fr = Frame(width, height, left=62, right=18, top=top, bottom=40, x0=x0, x1=x1,
               y0=yticks[0], y1=yticks[-1], x_log2=x_log2)
    y_fmt = _tick_formatter(yticks, y_fmt)
    if not x_log2:
        x_fmt = _tick_formatter(xticks, x_fmt)
    out = _svg_open(width, height, title)
    out += [_band(b, fr) for b in bands]
    out += _axes(fr, xticks, yticks, x_label, y_label, x_fmt, y_fmt)
    out += [_hline(h, fr) for h in hlines]
    placed: list[tuple[float, float, float, float]] = []  # scatter label boxes already drawn
    for s in series:
        out += _series(s, fr, scatter, x_fmt, y_fmt, placed)
    for m in marks:
        out += _mark(m, fr)
    if layout:
        out += _legend(layout, 14)
    out.append("</svg>")
    return "".join(out)


@dataclass
class Bar:
    label: str
    value: float | None
    color: str
    inner: float | None = None  # a part of the value drawn darker inside the bar (e.g. exposed copy time)


def _place_label(x: float, y: float, text: str, placed: list[tuple[float, float, float, float]],
                 fr: Frame) -> tuple[float, float, str]:
    """A position for a point's label that overlaps no label placed before (greedy, ~6.5 px/char)."""
    w, h = 6.5 * len(text), 11.0
    right_edge = fr.width - fr.right
    candidates = []
    for dy in (-6, 14, -18, 26, -30, 38, -42):
        candidates += [(x + 6, y + dy, "start"), (x - 6, y + dy, "end")]
    for lx, ly, anchor in candidates:
        x0 = lx if anchor == "start" else lx - w
        box = (x0, ly - h, x0 + w, ly)
        if box[0] < fr.left or box[2] > right_edge or box[1] < fr.top - 4 or box[3] > fr.height - fr.bottom:
            continue
        if all(box[2] <= b[0] or box[0] >= b[2] or box[3] <= b[1] or box[1] >= b[3] for b in placed):
            placed.append(box)
            return lx, ly, anchor
    anchor = "end" if x + 6 + w > right_edge else "start"
    return (x - 6 if anchor == "end" else x + 6), y - 6, anchor


def bar_plot(rows: Sequence[Bar], *, title: str, x_label: str, width: int = 540,
             x_fmt: Callable[[float], str] = fmt_tick, ref: HLine | None = None, inner_label: str = "") -> str:
    """Horizontal bars, one per row; `ref` draws a vertical reference line at ref.y."""
    bars = [(r, r.value) for r in rows if r.value is not None and math.isfinite(r.value)]
    if not bars:
        return ""
    bar_h, gap, top, bottom = 18, 8, 12, 40
    label_w = min(260, 12 + 7 * max(len(r.label) for r, _ in bars))
    height = top + bottom + len(bars) * (bar_h + gap)
    hi = max([value for _, value in bars] + ([ref.y] if ref else []))
    lo = min(0.0, min(value for _, value in bars))
    ticks = nice_ticks(lo, hi * 1.12 if hi > 0 else 1.0)
    fr = Frame(width, height, left=label_w, right=24, top=top, bottom=bottom, x0=ticks[0], x1=ticks[-1], y0=0, y1=1)
    out = _svg_open(width, height, title)
    for t in ticks:
        x = fr.px(t)
        out.append(f'<line class="grid" x1="{_f(x)}" y1="{top}" x2="{_f(x)}" y2="{height - bottom}"/>')
        out.append(f'<text class="tick" x="{_f(x)}" y="{height - bottom + 16}" text-anchor="middle">'
                   f"{esc(x_fmt(t))}</text>")
    for i, (r, value) in enumerate(bars):
        y = top + i * (bar_h + gap)
        xa, xb = fr.px(min(0.0, value)), fr.px(max(0.0, value))
        shown = x_fmt(value)
        tip = f"{r.label}: {shown}"
        if r.inner is not None and math.isfinite(r.inner):
            tip += f", {inner_label or 'of which'} {x_fmt(r.inner)}"
            shown += f" ({x_fmt(r.inner)})"
        out.append(f'<text class="tick" x="{label_w - 8}" y="{y + bar_h - 5}" text-anchor="end">{esc(r.label)}</text>')
        out.append(f'<rect class="bar" x="{_f(xa)}" y="{y}" width="{_f(max(xb - xa, 1.0))}" height="{bar_h}" '
                   f'fill="{esc(r.color)}" fill-opacity="0.55"><title>{esc(tip)}</title></rect>')
        if r.inner is not None and math.isfinite(r.inner) and r.inner > 0:
            xi = fr.px(min(r.inner, value))
            out.append(f'<rect class="bar inner" x="{_f(xa)}" y="{y}" width="{_f(max(xi - xa, 1.0))}" '
                       f'height="{bar_h}" fill="{esc(r.color)}"><title>{esc(tip)}</title></rect>')
        out.append(f'<text class="bar-value" x="{_f(xb + 4)}" y="{y + bar_h - 5}">{esc(shown)}</text>')
    if ref is not None:
        x = fr.px(ref.y)
        out.append(f'<g class="hline"><line x1="{_f(x)}" y1="{top - 4}" x2="{_f(x)}" y2="{height - bottom}" '
                   f'stroke="{esc(ref.color)}" stroke-dasharray="6 4"/><text x="{_f(x - 4)}" y="{height - bottom - 4}" '
                   f'text-anchor="end" fill="{esc(ref.color)}">{esc(ref.text)}</text></g>')
    out.append(f'<line class="axis" x1="{label_w}" y1="{height - bottom}" x2="{width - 24}" y2="{height - bottom}"/>')
    out.append(f'<text class="label" x="{_f((label_w + width - 24) / 2)}" y="{height - 4}" text-anchor="middle">'
               f"{esc(x_label)}</text>")
    out.append("</svg>")
    return "".join(out)


def _finite(p: tuple[float, float]) -> bool:
    return p[0] is not None and p[1] is not None and math.isfinite(p[0]) and math.isfinite(p[1])


def downsample(points: list[tuple[float, float]], max_points: int = 600) -> list[tuple[float, float]]:
    """Keep the shape of a long series in at most ~max_points points: min and max per bucket."""
    if len(points) <= max_points:
        return points
    n = max_points // 2
    size = len(points) / n
    out: list[tuple[float, float]] = []
    for i in range(n):
        bucket = points[int(i * size):int((i + 1) * size)]
        if not bucket:
            continue
        lo = min(bucket, key=lambda p: p[1])
        hi = max(bucket, key=lambda p: p[1])
        out += sorted({lo, hi}, key=lambda p: p[0])
    return out
