"""Section: telemetry over the run (the timeline with every training step shaded, or per-measurement
summaries from the facts alone).

With a run directory, the full series come from telemetry.csv and the steps from the StepMeasured
lines of events.jsonl (their `wall` stamp is the step's end; the start is the end minus the step
time). Both files share the wall clock (unix seconds).
"""
from __future__ import annotations

import csv
import json
import math
import re
from dataclasses import dataclass
from pathlib import Path

from gcdoctor.facts import Facts
from gcdoctor.report.model import GIB, MIB, Column, Key, Section, Table
from gcdoctor.report.svg import PALETTE, Band, Series, color_for, downsample, line_plot

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
        for _, h in names:
            series[h] = []
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



def _csv_path(facts: Facts, run_dir: Path | None) -> Path | None:
    if run_dir is None:
        return None
    name = (facts.telemetry.path if facts.telemetry and facts.telemetry.path else None) or "telemetry.csv"
    p = Path(run_dir) / Path(name).name
    return p if p.is_file() else None


def _step_bands(steps: list[StepSpan], t_origin: float) -> list[Band]:
    """Every step shaded by its variant (one band per measurement beyond MAX_BANDS steps)."""
    colors = {v: color_for(v, i) for i, v in enumerate(dict.fromkeys(s.variant for s in steps))}
    spans = steps if len(steps) <= MAX_BANDS else _merge_spans(steps)
    return [Band(s.t0 - t_origin, s.t1 - t_origin, colors[s.variant],
                 0.10 if s.phase in ("warmup", "search") else 0.22,
                 f"{s.probe} {s.variant} batch {s.batch_size} ({s.phase}), {1e3 * (s.t1 - s.t0):,.0f} ms")
            for s in spans]


def _panel_names(templates: list[str], devices: list[str], series: dict[str, list[float | None]]) -> list[str]:
    """A panel's series, one per device where the template has one, that hold at least one value."""
    names: list[str] = []
    for t in templates:
        names += [t.format(d=d) for d in devices] if "{d}" in t else [t]
    return [n for n in names if n in series and any(v is not None for v in series[n])]


def _panel_scale(unit: str, names: list[str], series: dict[str, list[float | None]]) -> tuple[float, str]:
    """The divisor and the unit shown: bytes in GiB or MiB, anything else as recorded."""
    if unit != "bytes":
        return 1.0, unit
    top = max(v for n in names for v in series[n] if v is not None)
    return (GIB, "GiB") if top >= GIB else (MIB, "MiB")


def timeline(facts: Facts, run_dir: Path | None) -> list[tuple[str, str]]:
    """Small multiples over wall time with every step shaded by variant; [] when there is no data."""
    if run_dir is None:
        return []
    csv_path = _csv_path(facts, run_dir)
    if csv_path is None:
        return []
    walls, series = read_telemetry_csv(csv_path)
    if len(walls) < 2:
        return []
    ev = Path(run_dir) / "events.jsonl"
    steps = read_steps(ev) if ev.is_file() else []
    t_origin = min([walls[0]] + [s.t0 for s in steps])
    bands = _step_bands(steps, t_origin)
    x_range = (0.0, max([walls[-1]] + [s.t1 for s in steps]) - t_origin)
    devices = sorted({m.group(1) for name in series for m in [re.match(r"^(gpu\d+)\.", name)] if m})
    legend = ", ".join(dict.fromkeys(s.variant for s in steps))
    figs: list[tuple[str, str]] = []
    for title, unit, templates in PANELS:
        names = _panel_names(templates, devices, series)
        if not names:
            continue
        div, shown_unit = _panel_scale(unit, names, series)
        plot_series = [Series(n, downsample([(w - t_origin, v / div) for w, v in zip(walls, series[n])
                                             if v is not None]), PALETTE[(i + 2) % len(PALETTE)], markers=False)
                       for i, n in enumerate(names)]
        svg = line_plot(plot_series, title=f"{title} over the run", x_label="seconds since the run started",
                        y_label=shown_unit, bands=bands, width=1040, height=200, x_range=x_range)
        figs.append((svg, f"{title} ({shown_unit}); shaded: training steps, coloured by variant "
                          f"({legend or 'none recorded'}; light: warm-up and search steps)."))
    return figs


def _keys(facts: Facts) -> list[Key]:
    t = facts.telemetry
    if t is None:
        return []
    out = [Key("sources", "sources", ", ".join(t.sources) or t.source or "—"),
           Key("rate", "rate asked / achieved", f"{t.rate_hz or 0:g} Hz / "
                                                 + (f"{t.achieved_rate_hz:.1f} Hz" if t.achieved_rate_hz else "—")),
           Key("samples", "samples", f"{t.samples:,}" + (f", {t.missed_ticks} missed ticks" if t.missed_ticks else "")),
           Key("duration", "duration", t.duration_s, "s"),
           Key("overhead", "sampler CPU, % of one core", t.overhead_cpu_pct, "pct")]
    for d in t.devices:
        out.append(Key(f"device-{d.key}", f"device {d.key}",
                       f"{d.name or '—'} ({d.source}), PCIe gen {d.pcie_link_gen_current}/{d.pcie_link_gen_max} "
                       f"x{d.pcie_link_width_current}/{d.pcie_link_width_max}, peak "
                       + (f"{d.pcie_link_peak_gbs:.1f} GB/s" if d.pcie_link_peak_gbs else "—") + " per direction"))
    return out


def _summary_rows(facts: Facts) -> list[list]:
    ms = [m for m in (facts.sweep.measurements if facts.sweep else []) if m.telemetry]
    names = list(dict.fromkeys(n for m in ms for n in m.telemetry))[:8]
    rows = []
    for m in ms:
        row = [f"{m.probe}/{m.variant}", m.batch_size]
        for n in names:
            s = m.telemetry.get(n)
            row.append(None if s is None or s.mean is None else f"{s.mean:,.3g} (max {s.max:,.3g})")
        rows.append(row)
    return rows


def _missing_rows(facts: Facts) -> list[list]:
    t = facts.telemetry
    return sorted([k, v] for k, v in t.unavailable.items()) if t is not None else []


def _tables(facts: Facts) -> list[Table]:
    ms = [m for m in (facts.sweep.measurements if facts.sweep else []) if m.telemetry]
    names = list(dict.fromkeys(n for m in ms for n in m.telemetry))[:8]
    out = [Table("telemetry-summaries", [Column("measurement", key=True), Column("batch", "int", key=True)]
                 + [Column(n, "text") for n in names], _summary_rows,
                 title="Per-measurement telemetry: mean (max) over the measured steps", fold=True)]
    t = facts.telemetry
    if t is not None and t.unavailable:
        out.append(Table("telemetry-missing", [Column("series", key=True), Column("why", "text")],
                         _missing_rows,
                         title=f"{len(t.unavailable)} series not measured", fold=True))
    return out


def _lead(facts: Facts) -> str:
    return ("The run's telemetry on one clock: every series sampled, every training step shaded (with the run "
            "directory), else per-measurement summaries. Device counters average over their own window "
            "(utilisation up to 1 s, power about 1 s), so they can trail the shading.")


SECTION = Section(
    id="telemetry", title="Telemetry", facts="telemetry",
    present=lambda f: f.telemetry is not None or any(m.telemetry for m in (f.sweep.measurements if f.sweep else [])),
    lead=_lead, keys=_keys, tables=_tables, plots=timeline,
    notes=lambda f: list(f.telemetry.notes) if f.telemetry is not None else [], topics=(), wide_plots=True)
