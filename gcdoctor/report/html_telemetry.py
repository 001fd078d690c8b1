"""report.html: the telemetry timeline with step boundaries, or per-measurement summaries.

With a run directory, the full series come from telemetry.csv and the steps from the
StepMeasured lines of events.jsonl (their `wall` stamp is the step's end; the start is the end
minus the step time). Both files share the wall clock (unix seconds). From facts alone, the
per-measurement summaries each Measurement carries are shown instead.
"""
from __future__ import annotations

import csv
import json
import math
import re
from dataclasses import dataclass
from pathlib import Path

from gcdoctor.facts import Facts
from gcdoctor.report.format import GIB
from gcdoctor.report.html_parts import MIB, Raw, by_unit, details, figure, kv, para, section, table
from gcdoctor.report.svg import PALETTE, Band, Series, color_for, downsample, esc, line_plot

# One panel per group of series; "{d}" is a device prefix such as gpu0.
PANELS = [
    ("Device utilisation", "%", ["{d}.util_pct", "{d}.mem_util_pct"]),
    ("Device memory used", "bytes", ["{d}.mem_used_bytes"]),
    ("PCIe throughput", "GB/s", ["{d}.pcie_rx_gbs", "{d}.pcie_tx_gbs"]),
    ("Device power", "W", ["{d}.power_w"]),
    ("SM clock", "MHz", ["{d}.sm_clock_mhz"]),
    ("Host CPU", "%", ["cpu_pct", "cpu_max_core_pct", "cpu_iowait_pct"]),
    ("CPU of the training process", "% of one core", ["proc_cpu_pct"]),
    ("Host memory", "bytes", ["proc_rss_bytes", "host_mem_used_bytes"]),
]
MAX_BANDS = 1500  # beyond this the steps are drawn as one band per measurement


@dataclass
class StepSpan:
    probe: str
    variant: str
    batch_size: int
    phase: str
    t0: float  # wall seconds
    t1: float


def read_telemetry_csv(path: Path) -> tuple[list[float], dict[str, list[float | None]]]:
    """Wall times and every series (None for empty cells) from telemetry.csv."""
    walls: list[float] = []
    series: dict[str, list[float | None]] = {}
    with open(path, newline="") as fh:
        reader = csv.reader(fh)
        header = next(reader, None)
        if not header or "wall_time_s" not in header:
            return [], {}
        wi = header.index("wall_time_s")
        names = [(i, h) for i, h in enumerate(header) if h not in ("t_monotonic_s", "wall_time_s")]
        for h in names:
            series[h[1]] = []
        for row in reader:
            try:
                walls.append(float(row[wi]))
            except (ValueError, IndexError):
                continue
            for i, h in names:
                try:
                    v = float(row[i]) if i < len(row) and row[i] != "" else None
                except ValueError:
                    v = None
                series[h].append(v if v is None or math.isfinite(v) else None)
    return walls, series


def read_steps(path: Path) -> list[StepSpan]:
    """Step spans from the StepMeasured events (skipping every other event without parsing it)."""
    steps: list[StepSpan] = []
    with open(path) as fh:
        for line in fh:
            if '"StepMeasured"' not in line:
                continue
            try:
                d = json.loads(line)
                end, ms = float(d["wall"]), float(d["step_ms"])
            except (ValueError, KeyError, TypeError):
                continue
            steps.append(StepSpan(str(d.get("probe", "")), str(d.get("variant", "")), int(d.get("batch_size") or 0),
                                  str(d.get("phase", "")), end - ms / 1e3, end))
    return steps


def _merge_spans(steps: list[StepSpan]) -> list[StepSpan]:
    """Consecutive steps of the same measurement as one span (for very long runs)."""
    out: list[StepSpan] = []
    for s in steps:
        last = out[-1] if out else None
        if last and (last.probe, last.variant, last.batch_size) == (s.probe, s.variant, s.batch_size):
            last.t1 = s.t1
        else:
            out.append(StepSpan(s.probe, s.variant, s.batch_size, s.phase, s.t0, s.t1))
    return out


def timeline(run_dir: Path, facts: Facts) -> Raw:
    """Small multiples over wall time with every step shaded by variant; "" when there is no data."""
    csv_name = (facts.telemetry.path if facts.telemetry and facts.telemetry.path else None) or "telemetry.csv"
    csv_path = run_dir / Path(csv_name).name
    if not csv_path.is_file():
        return Raw("")
    walls, series = read_telemetry_csv(csv_path)
    if len(walls) < 2:
        return Raw("")
    ev = run_dir / "events.jsonl"
    steps = read_steps(ev) if ev.is_file() else []
    t_origin = min([walls[0]] + [s.t0 for s in steps])
    variants = list(dict.fromkeys(s.variant for s in steps))
    colors = {v: color_for(v, i) for i, v in enumerate(variants)}
    spans = steps if len(steps) <= MAX_BANDS else _merge_spans(steps)
    bands = [Band(s.t0 - t_origin, s.t1 - t_origin, colors[s.variant],
                  0.10 if s.phase in ("warmup", "search") else 0.22,
                  f"{s.probe} {s.variant} batch {s.batch_size} ({s.phase}), {1e3 * (s.t1 - s.t0):,.0f} ms")
             for s in spans]
    x_range = (0.0, max([walls[-1]] + [s.t1 for s in steps]) - t_origin)
    devices = sorted({m.group(1) for name in series for m in [re.match(r"^(gpu\d+)\.", name)] if m})
    figs: list[str] = []
    for title, unit, templates in PANELS:
        names: list[str] = []
        for t in templates:
            names += [t.format(d=d) for d in devices] if "{d}" in t else [t]
        present = [n for n in names if n in series and any(v is not None for v in series[n])]
        if not present:
            continue
        div, shown_unit = 1.0, unit
        if unit == "bytes":
            top = max(v for n in present for v in series[n] if v is not None)
            div, shown_unit = (GIB, "GiB") if top >= GIB else (MIB, "MiB")
        plot_series = []
        for i, n in enumerate(present):
            pts = [(w - t_origin, v / div) for w, v in zip(walls, series[n]) if v is not None]
            plot_series.append(Series(n, downsample(pts), PALETTE[(i + 2) % len(PALETTE)], markers=False))
        svg = line_plot(plot_series, title=f"{title} over the run", x_label="seconds since the run started",
                        y_label=shown_unit, bands=bands, width=1040, height=200, x_range=x_range)
        figs.append(figure(svg, f"{title} ({shown_unit}); shaded: training steps, coloured by variant "
                                f"(light: warm-up and search steps)."))
    if not figs:
        return Raw("")
    legend = "".join(f'<span class="swatch" style="background:{esc(c)}"></span>{esc(v)} ' for v, c in colors.items())
    n_steps = len(steps)
    # NVML: utilisation is "over the past sample period", 1/6 s to 1 s depending on the product
    head = para(f"{len(walls):,} samples over {walls[-1] - walls[0]:,.1f} s; {n_steps:,} steps from events.jsonl. "
                "Device counters average over their own window (utilisation up to 1 s, power about 1 s), so they "
                "can trail the shading; profiled steps emit no step events and are not shaded.")
    return Raw(head + (f'<p class="legend-line">steps: {legend}</p>' if legend else "") +
               f'<div class="timeline">{"".join(figs)}</div>')


def summaries(facts: Facts) -> Raw:
    """Per-measurement telemetry (mean / max of each series over the measured steps)."""
    ms = [m for m in (facts.sweep.measurements if facts.sweep else []) if m.telemetry]
    if not ms:
        return Raw("")
    names = list(dict.fromkeys(n for m in ms for n in m.telemetry))[:10]
    rows = []
    for m in ms:
        row = [f"{m.probe}/{m.variant}", m.batch_size]
        for n in names:
            s = m.telemetry.get(n)
            if s is None or s.mean is None:
                row.append(None)
            else:
                row.append(f"{by_unit(n, s.mean)} (max {by_unit(n, s.max)})")
        rows.append(row)
    return table(["measurement", "batch"] + names, rows)


def telemetry_section(facts: Facts, run_dir: Path | None) -> str:
    t = facts.telemetry
    tl = timeline(run_dir, facts) if run_dir is not None else Raw("")
    sums = summaries(facts)
    if t is None and not tl and not sums:
        return ""
    info = []
    if t is not None:
        info = [("sources", ", ".join(t.sources) or t.source or "—"),
                ("rate", f"{by_unit('rate_hz', t.rate_hz)} asked, {by_unit('rate_hz', t.achieved_rate_hz)} achieved"),
                ("samples", f"{t.samples:,}" + (f", {t.missed_ticks} missed ticks" if t.missed_ticks else "")),
                ("duration", by_unit("duration_s", t.duration_s)),
                ("sampler overhead", by_unit("overhead_cpu_pct", t.overhead_cpu_pct) + " of one core"
                 if t.overhead_cpu_pct is not None else None)]
        for d in t.devices:
            info.append((f"device {d.key}", f"{d.name or '—'} ({d.source}), PCIe gen {d.pcie_link_gen_current}"
                         f"/{d.pcie_link_gen_max} x{d.pcie_link_width_current}/{d.pcie_link_width_max}, "
                         f"peak {by_unit('pcie_link_peak_gbs', d.pcie_link_peak_gbs)} per direction"))
        info = [(k, v) for k, v in info if v is not None]
    extra = []
    if t is not None and t.unavailable:
        extra.append(details(f"{len(t.unavailable)} series not measured",
                             table(["series", "why"], sorted(t.unavailable.items()), numeric_from=9)))
    if t is not None and t.notes:
        extra.append(details("Caveats of the counters", Raw("<ul>" + "".join(
            f"<li>{esc(n)}</li>" for n in t.notes) + "</ul>")))
    if tl:
        body = [tl, kv(info) if info else "", details("Per-measurement telemetry", sums) if sums else ""]
        lead = "The whole run on one clock: every series sampled, every training step shaded."
    else:
        why = ("no telemetry.csv beside the facts" if run_dir is not None else "rendered from facts alone")
        body = [para(f"Timeline not drawn: {why}; per-measurement summaries follow."), kv(info) if info else "",
                sums]
        lead = "Telemetry over each measurement's steps (mean, and max in brackets)."
    return section("telemetry", "Telemetry timeline", *body, *extra, lead=lead)
