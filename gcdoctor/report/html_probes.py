"""report.html: the granularity section, the memory model, the trace metrics and the profiler
overhead (offload and jitter have their own modules).

Each section renders the fields that exist and returns "" when its facts are None, so a run with
some probes skipped (or facts written by an older gcdoctor) still renders.
"""
from __future__ import annotations

from typing import Any

from gcdoctor.facts import Facts
from gcdoctor.report.html_parts import (bullets, by_unit, details, fbytes, figure, figures, fnum, fpct, fshare,
                                        generic_block, kv, para, section, table)
from gcdoctor.report.svg import Bar, Series, bar_plot, color_for, esc, line_plot


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


def _v(obj: Any, name: str) -> Any:
    """A data field of a facts object, or None (absent in an older or newer shape, or a method)."""
    value = getattr(obj, name, None) if obj is not None else None
    return None if callable(value) else value


# (header, field, formatter) of the granularity table; fields a facts version lacks show as empty
GRANULARITY_COLUMNS = [
    ("regions/step", "regions_per_step", fnum),
    ("checkpointed ops/step", "checkpointed_ops_per_step", fnum),
    ("recomputed ops/step", "recomputed_ops_per_step", fnum),
    ("peak", "peak_allocated_bytes", fbytes),
    ("kept for backward", "saved_activation_bytes", fbytes),
    ("time added", "time_added_pct", lambda x: fpct(x, signed=True)),
    ("memory saved", "memory_saved_bytes", fbytes),
    ("saved %", "memory_saved_pct", fpct),
    ("kernels/step", "kernels_per_step", lambda x: fnum(x, 0)),
    ("device idle", "device_idle_share", fshare),
    ("mean kernel", "kernel_mean_us", lambda x: by_unit("kernel_mean_us", x)),
    ("CPU ops/step", "cpu_ops_per_step", lambda x: fnum(x, 0)),
]


def _granularity_group(group: Any) -> str:
    best_fn = getattr(group, "best_tradeoff", None)
    best = best_fn() if callable(best_fn) else None
    head = (f"{group.description + ': ' if group.description else ''}batch {group.batch_size}, sequence "
            f"{group.seq_len}, {group.n_layers} layers of hidden size {group.hidden_size}, {group.dtype}.")
    lines = [head]
    if best is not None:
        lines.append(f"Best trade-off: {best.variant}, {fpct(best.memory_saved_pct)} of the activation memory "
                     f"kept for backward saved, for {fpct(best.time_added_pct, signed=True)} step time.")
    rows, ids = [], []
    for v in group.variants:
        m = _v(v, "measurement")
        fits = m is None or m.fits
        step = fnum(_v(v, "step_ms")) if fits else f"OOM ({m.oom_phase})"
        rows.append([v.variant, _v(v, "description") or "", step]
                    + [None if _v(v, f) is None else fmt(_v(v, f)) for _, f, fmt in GRANULARITY_COLUMNS])
        ids.append(f"{group.name}:{v.variant}")
    t = table(["variant", "what is checkpointed", "step ms"] + [h for h, _, _ in GRANULARITY_COLUMNS], rows,
              numeric_from=2, ids=ids, drop_empty=True)
    plot = figure(_granularity_plot(group), "Each point is one granularity at equal batch; up and to the left "
                                            "is better (more memory saved for less time).")
    return f'<h3>{esc(group.name)}</h3>' + para(" ".join(lines)) + figures(plot) + t


def _launch_cost(lc: Any) -> str:
    if lc is None:
        return ""
    fixed, per_op = _v(lc, "region_fixed_us"), _v(lc, "region_per_op_us")
    graph_api = _v(lc, "graph_api")
    rows = [("one kernel launch (back to back, synchronised)", by_unit("launch_us", _v(lc, "launch_us"))),
            ("host enqueue per launch", by_unit("enqueue_us", _v(lc, "enqueue_us"))),
            ("graph replay per op" + (f" ({graph_api})" if graph_api else ""),
             by_unit("graph_replay_us_per_op", _v(lc, "graph_replay_us_per_op"))),
            ("host cost per checkpoint region", f"{fnum(fixed, 1)} µs + {fnum(per_op, 2)} µs per forward op"
             if fixed is not None and per_op is not None else None),
            # older facts: one tiny region timed, its host cost as a number
            ("host cost per checkpoint region", by_unit("region_host_us", _v(lc, "region_host_us")))]
    rows = [(k, v) for k, v in rows if v not in (None, "—")]
    points = _v(lc, "region_points") or []
    pt = table(["region", "forward ops", "recomputed ops", "plain", "in checkpoint()", "extra beyond launches"],
               [[_v(p, "name"), _v(p, "forward_ops"), _v(p, "recomputed_ops"), by_unit("plain_us", _v(p, "plain_us")),
                 by_unit("checkpoint_us", _v(p, "checkpoint_us")), by_unit("extra_us", _v(p, "extra_us"))]
                for p in points]) if points else ""
    return ("<h3>Launch cost of this device</h3>" + kv(rows) + pt
            + bullets(_v(lc, "notes") or [], "notes"))


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


# memory model ------------------------------------------------------------------------------
def _breakdown_plot(point: Any) -> str:
    parts = sorted(((k, v) for k, v in (point.peak_breakdown or {}).items() if v), key=lambda kv: -kv[1])
    if not parts:
        return ""
    bars = [Bar(k, v / 2**30, color_for(point.variant, 0)) for k, v in parts]
    return bar_plot(bars, title=f"What fills the predicted peak: {point.variant}, batch {point.batch_size}",
                    x_label="GiB live at the peak", x_fmt=lambda x: f"{x:.3g}")


def memory_model_section(facts: Facts) -> str:
    mm = facts.memory_model
    if mm is None:
        return ""
    points = getattr(mm, "points", None)
    if points is None:  # a shape this writer does not know
        body = generic_block(mm, "memory_model", facts.unavailable)
        return section("memory-model", "Analytic memory model", body) if body else ""
    per_token = [("model states", f"{fbytes(mm.model_state_bytes)} (parameters {fbytes(mm.param_bytes)}, gradients "
                                  f"{fbytes(mm.grad_bytes)}, optimizer states {fbytes(mm.optimizer_state_bytes)})"),
                 ("one decoder layer, per token", f"{mm.layer_activation_bytes_per_token:,} bytes"),
                 ("one checkpointed layer, per token", f"{mm.checkpoint_residue_bytes_per_token:,} bytes"),
                 ("logits and loss, per token", f"{mm.loss_block_bytes_per_token:,} bytes"),
                 ("capacity / usable", f"{fbytes(mm.capacity_bytes)} / {fbytes(mm.usable_bytes)}"
                  if mm.capacity_bytes else None)]
    s = facts.sweep
    for v, b in (mm.max_batch or {}).items():
        measured = s.max_batch.get(v) if s is not None else None
        fixed = " (largest of the fixed --batch-sizes)" if s is not None and not s.searched else ""
        per_token.append((f"largest batch, {v}", f"predicted {b if b else 'none'}"
                          + (f", measured {measured}{fixed}" if measured is not None else "")))
    rows, ids = [], []
    for p in sorted(points, key=lambda p: (p.variant != "no_gc", p.batch_size)):
        m = s.get(p.variant, p.batch_size) if s is not None else None
        err = None
        if m is not None and m.peak_allocated_bytes:
            err = fpct(100.0 * (p.peak_bytes / m.peak_allocated_bytes - 1.0), signed=True)
        rows.append([p.variant, p.batch_size, fbytes(p.peak_bytes), fbytes(_attr(m, "peak_allocated_bytes")), err,
                     p.peak_where or p.peak_phase, fbytes(p.activations_after_forward_bytes),
                     fbytes(_attr(m, "activation_after_forward_bytes"))])
        ids.append(f"predicted:{p.variant}:{p.batch_size}")
    t = table(["variant", "batch", "predicted peak", "measured peak", "error", "predicted peak at",
               "predicted activations after forward", "measured"], rows, numeric_from=1, ids=ids, drop_empty=True)
    largest = [max((p for p in points if p.variant == v), key=lambda p: p.batch_size)
               for v in dict.fromkeys(p.variant for p in points)]
    plots = figures(*[figure(_breakdown_plot(p), f"{p.variant}, batch {p.batch_size}: live memory by category at "
                                                  f"the predicted peak ({p.peak_where or p.peak_phase}).")
                      for p in largest])
    lead = (f"{mm.model} ({'exact shapes' if mm.exact else 'approximated by a Llama layer'}), {mm.dtype}, "
            f"{mm.optimizer}, sequence {mm.seq_len}, {mm.device} semantics: what the shapes predict, held against "
            "what was measured.")
    return section("memory-model", "Analytic memory model: predicted versus measured", kv(per_token), t, plots,
                   bullets(mm.notes, "notes"), lead=lead)


def _attr(obj: Any, name: str) -> Any:
    return getattr(obj, name, None) if obj is not None else None


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
    parts = [table(headers, [row(k, t) for k, t in main.items()], ids=list(main), drop_empty=True)]
    reasons = sorted({t.device_unavailable for t in facts.trace.values() if t.device_unavailable})
    if reasons:
        parts.insert(0, para("Device metrics unavailable: " + "; ".join(reasons)))
    if windows:
        parts.append(details(f"{len(windows)} labelled windows (forward, backward, recompute, optimizer, steps)",
                             table(headers, [row(k, t) for k, t in windows.items()], ids=list(windows),
                                   drop_empty=True)))
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
