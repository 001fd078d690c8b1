"""report.html: the sections of the many-variant probes (granularity, offload, jitter), the memory
model, the trace metrics and the profiler overhead.

Each section renders the fields that exist and returns "" when its facts are None, so a run with
some probes skipped (or facts written by an older gcdoctor) still renders.
"""
from __future__ import annotations

import dataclasses
from typing import Any

from gcdoctor.facts import Facts
from gcdoctor.report.html_parts import (Raw, bullets, by_unit, details, fbytes, figure, figures, fnum, fpct,
                                        fshare, generic_block, kv, para, section, table)
from gcdoctor.report.svg import HLine, Series, bar_plot, color_for, esc, line_plot


# granularity -------------------------------------------------------------------------------
def _granularity_plot(group: Any) -> str:
    pts, labels = [], []
    for v in group.variants:
        if getattr(v, "time_added_pct", None) is None or getattr(v, "memory_saved_pct", None) is None:
            continue
        pts.append((v.time_added_pct, v.memory_saved_pct))
        labels.append(v.variant)
    if not pts:
        return ""
    return line_plot([Series(group.name, pts, color_for("gc", 0), labels=labels)], scatter=True,
                     title=f"Memory saved versus time added: {group.name}", x_label="step time added (%)",
                     y_label="activation memory saved (%)", y_from_zero=True)


def _granularity_group(group: Any) -> str:
    best_fn = getattr(group, "best_tradeoff", None)
    best = best_fn() if callable(best_fn) else None
    head = (f"{group.description + ': ' if group.description else ''}batch {group.batch_size}, sequence "
            f"{group.seq_len}, {group.n_layers} layers of hidden size {group.hidden_size}, {group.dtype}.")
    lines = [head]
    if best is not None:
        lines.append(f"Best trade-off: {best.variant}, {fpct(best.memory_saved_pct)} of the activations saved "
                     f"for {fpct(best.time_added_pct, signed=True)} step time.")
    rows, ids = [], []
    for v in group.variants:
        m = getattr(v, "measurement", None)
        fits = m is None or m.fits
        rows.append([v.variant, v.description or "",
                     v.regions_per_step, v.recomputed_ops_per_step,
                     fnum(v.step_ms) if fits else f"OOM ({m.oom_phase})",
                     fbytes(v.peak_allocated_bytes), fbytes(v.activation_peak_bytes),
                     fpct(v.time_added_pct, signed=True), fbytes(v.memory_saved_bytes), fpct(v.memory_saved_pct),
                     fnum(v.kernels_per_step, 0), fshare(v.device_idle_share), by_unit("kernel_mean_us", v.kernel_mean_us),
                     fnum(v.cpu_ops_per_step, 0)])
        ids.append(f"{group.name}:{v.variant}")
    t = table(["variant", "what is checkpointed", "regions/step", "recomputed ops/step", "step ms", "peak",
               "activations", "time added", "memory saved", "saved %", "kernels/step", "device idle",
               "mean kernel", "CPU ops/step"], rows, numeric_from=2, ids=ids)
    plot = figure(_granularity_plot(group), "Each point is one granularity at equal batch; up and to the left "
                                            "is better (more memory saved for less time).")
    return f'<h3>{esc(group.name)}</h3>' + para(" ".join(lines)) + figures(plot) + t


def _launch_cost(lc: Any) -> str:
    if lc is None:
        return ""
    rows = [("one kernel launch (back to back, synchronised)", by_unit("launch_us", lc.launch_us)),
            ("host enqueue per launch", by_unit("enqueue_us", lc.enqueue_us)),
            ("graph replay per op" + (f" ({lc.graph_api})" if lc.graph_api else ""),
             by_unit("graph_replay_us_per_op", lc.graph_replay_us_per_op)),
            ("tiny region fwd+bwd, plain", by_unit("region_plain_us", lc.region_plain_us)),
            ("the same inside checkpoint()", by_unit("region_checkpoint_us", lc.region_checkpoint_us)),
            ("ops recomputed by that region", lc.region_recomputed_ops),
            ("host cost per checkpoint region", by_unit("region_host_us", lc.region_host_us))]
    rows = [(k, v) for k, v in rows if v not in (None, "—")]
    return "<h3>Launch cost of this device</h3>" + kv(rows) + bullets(getattr(lc, "notes", []), "notes")


def granularity_section(facts: Facts) -> str:
    g = facts.granularity
    if g is None:
        return ""
    groups = getattr(g, "groups", None)
    if groups is None:  # a shape this writer does not know: show every field
        return section("granularity", "Checkpoint granularity", generic_block(g, "granularity", facts.unavailable))
    if not groups and getattr(g, "launch", None) is None:
        return ""
    lead = (f"Checkpoint regions from the whole layer down to single ops, at equal batch; "
            f"{g.measure_steps} measured steps after {g.warmup_steps} warm-up, {g.checkpoint_api}.")
    parts = [_granularity_group(gr) for gr in groups] + [_launch_cost(getattr(g, "launch", None)),
                                                        bullets(g.notes, "notes")]
    return section("granularity", "Checkpoint granularity: memory saved versus time added", *parts, lead=lead)


# offload -----------------------------------------------------------------------------------
def _rows_with(obj: Any, *attrs: str) -> list[Any]:
    """All dataclass rows (in list fields of obj) that have every one of `attrs`."""
    out = []
    for f in dataclasses.fields(obj):
        v = getattr(obj, f.name)
        if isinstance(v, list) and v and dataclasses.is_dataclass(v[0]) and all(hasattr(v[0], a) for a in attrs):
            out += v
    return out


def _name(row: Any) -> str:
    for k in ("variant", "name", "key"):
        v = getattr(row, k, None)
        if isinstance(v, str) and v:
            return v
    return "?"


def offload_section(facts: Facts) -> str:
    o = facts.offload
    if o is None:
        return ""
    figs = []
    rows = _rows_with(o, "variant")
    gbs_fields = sorted({f.name for r in rows for f in dataclasses.fields(r) if f.name.endswith("_gbs")
                         and getattr(r, f.name) is not None})
    peak = facts.environment.pcie_peak_gbs or (facts.telemetry.pcie_link_peak_gbs if facts.telemetry else None)
    for fname in gbs_fields:
        bars = [(_name(r), getattr(r, fname), color_for(_name(r), i)) for i, r in enumerate(rows)
                if getattr(r, fname, None) is not None]
        figs.append(figure(bar_plot(bars, title=f"{fname.replace('_', ' ')} per variant", x_label="GB/s",
                                    ref=HLine(peak, f"link peak {peak:.0f} GB/s") if peak else None),
                           f"{fname.replace('_', ' ')} (GB/s, 1 GB = 1e9 bytes) per offload variant."))
    time_fields = [f for f in ("step_ms", "copy_ms", "copy_time_ms", "exposed_copy_ms", "copy_exposed_ms")
                   if any(getattr(r, f, None) is not None for r in rows)]
    for fname in time_fields:
        bars = [(_name(r), getattr(r, fname), color_for(_name(r), i)) for i, r in enumerate(rows)
                if getattr(r, fname, None) is not None]
        figs.append(figure(bar_plot(bars, title=f"{fname.replace('_', ' ')} per variant", x_label="ms"),
                           f"{fname.replace('_', ' ')} per offload variant."))
    return section("offload", "Offload: copy time and PCIe throughput", figures(*figs),
                   generic_block(o, "offload", facts.unavailable),
                   lead="Activation and optimizer offload variants at equal batch: how long the copies take, "
                        "how much of them the compute hides, and the PCIe throughput they reach.")


# jitter ------------------------------------------------------------------------------------
def _loss_curves(obj: Any) -> list[Series]:
    """Every list of losses in the jitter facts, one curve each, keyed by its row's name."""
    series: list[Series] = []
    for f in dataclasses.fields(obj):
        v = getattr(obj, f.name)
        if isinstance(v, list) and v and all(isinstance(x, (int, float)) for x in v) and "loss" in f.name:
            series.append(Series(f.name, list(enumerate(map(float, v))), color_for(f.name, len(series))))
        elif isinstance(v, list) and v and dataclasses.is_dataclass(v[0]):
            for row in v:
                for rf in dataclasses.fields(row):
                    lv = getattr(row, rf.name)
                    if "loss" in rf.name and isinstance(lv, list) and lv and \
                            all(isinstance(x, (int, float)) for x in lv):
                        name = _name(row) if rf.name == "losses" else f"{_name(row)} {rf.name}"
                        series.append(Series(name, list(enumerate(map(float, lv))),
                                             color_for(_name(row), len(series)), markers=len(lv) <= 40))
    return series


def jitter_section(facts: Facts) -> str:
    j = facts.jitter
    if j is None:
        return ""
    curves = _loss_curves(j)
    plot = figure(line_plot(curves, title="Loss per step, checkpointing on and off", x_label="step",
                            y_label="loss", y_from_zero=False),
                  "Same seed and data for every curve: curves that separate beyond the run-to-run spread "
                  "of the same configuration point at the recomputation.") if curves else ""
    return section("jitter", "Loss jitter from recomputation", figures(plot),
                   generic_block(j, "jitter", facts.unavailable),
                   lead="Losses with checkpointing against losses without it, next to the run-to-run difference "
                        "of the same configuration.")


# memory model ------------------------------------------------------------------------------
def memory_model_section(facts: Facts) -> str:
    mm = facts.memory_model
    if mm is None:
        return ""
    body = generic_block(mm, "memory_model", facts.unavailable)
    if not body:
        return ""
    return section("memory-model", "Analytic memory model", body,
                   lead="What the model's shapes predict for model states and activations, to hold the "
                        "measurements against.")


# trace -------------------------------------------------------------------------------------
def trace_section(facts: Facts) -> str:
    if not facts.trace:
        return ""
    main = {k: t for k, t in facts.trace.items() if "|" not in k}
    windows = {k: t for k, t in facts.trace.items() if "|" in k}

    def row(k: str, t: Any) -> list[Any]:
        return [k, by_unit("wall_ms", t.wall_us / 1e3) if t.wall_us is not None else None,
                fnum(t.cpu_op_count), fshare(t.busy_share), fnum(t.kernel_count),
                by_unit("kernel_mean_us", t.kernel_mean_us), by_unit("idle_host_wait_us", t.idle_host_wait_us),
                by_unit("copy_time_us", t.copy_time_us), fshare(t.copy_overlap_share), fshare(t.recompute_share)]

    headers = ["trace window", "host wall", "CPU ops", "device busy", "kernels", "mean kernel",
               "idle waiting on host", "memcpy", "copy hidden", "recompute share"]
    all_rows = [row(k, t) for k, t in facts.trace.items()]
    keep = [i for i in range(len(headers)) if i == 0 or any(r[i] not in (None, "—") for r in all_rows)]

    def cut(rows: list[list[Any]]) -> list[list[Any]]:
        return [[r[i] for i in keep] for r in rows]

    headers = [headers[i] for i in keep]  # columns empty in every window (no device on a CPU) are left out
    parts = [table(headers, cut([row(k, t) for k, t in main.items()]), ids=list(main))]
    reasons = sorted({t.device_unavailable for t in facts.trace.values() if t.device_unavailable})
    if reasons:
        parts.insert(0, para("Device metrics unavailable: " + "; ".join(reasons)))
    if windows:
        parts.append(details(f"{len(windows)} labelled windows (forward, backward, recompute, optimizer, steps)",
                             table(headers, cut([row(k, t) for k, t in windows.items()]), ids=list(windows))))
    sources = sorted({t.source for t in facts.trace.values() if t.source})
    if sources:
        parts.append(para("Traces (open in ui.perfetto.dev): " + ", ".join(sources), "small"))
    return section("trace", "Profiler traces", *parts,
                   lead="Two profiled steps per variant; times from the trace, not the wall clock.")


def profiler_overhead_section(facts: Facts) -> str:
    if not facts.profiler_overhead:
        return ""
    rows = [[p.variant, p.batch_size, fnum(p.unprofiled_step_ms), fnum(p.profiled_step_ms),
             fpct(p.overhead_pct, signed=True)] for p in facts.profiler_overhead]
    return section("profiler-overhead", "Profiler overhead",
                   table(["window", "batch", "unprofiled ms", "profiled ms", "overhead"], rows),
                   lead="Verdicts use the unprofiled step times; this is what profiling added.")
