"""Section: checkpoint granularity (whole layers down to single ops, at equal batch) and the device's
launch and region costs."""
from __future__ import annotations

from pathlib import Path

from gcdoctor.facts import Facts, GranularityFacts
from gcdoctor.rules._granularity import BEST_MIN_SAVING_PCT, BEST_MIN_TIME_ADDED_PCT, best_tradeoff
from gcdoctor.report.model import Column, Key, Section, Table
from gcdoctor.report.svg import Series, color_for, line_plot

BEST_RULE = (f"Best trade-off: the variant with the most activation memory saved per percent of step time added, "
             f"among those saving at least {BEST_MIN_SAVING_PCT:.0f}% (time added below "
             f"{BEST_MIN_TIME_ADDED_PCT:.0f}% counts as {BEST_MIN_TIME_ADDED_PCT:.0f}%).")

COLUMNS = [Column("workload", key=True), Column("variant", key=True), Column("what is checkpointed", "text"),
           Column("result", "text"), Column("step", "ms", compare=True), Column("time added", "pct+", compare=True),
           Column("kept for backward", "bytes"), Column("memory saved", "bytes", compare=True),
           Column("saved", "pct", compare=True), Column("step peak", "bytes"), Column("regions/step", "int"),
           Column("ops inside regions/step", "int"), Column("recomputed ops/step", "int"),
           Column("kernels/step", "int"), Column("device idle", "share"), Column("mean kernel", "us"),
           Column("recompute share", "share"), Column("CPU ops/step", "int")]


def _rows(facts: Facts) -> list[list]:
    gr = facts.granularity
    if gr is None:
        return []
    rows = []
    for g in gr.groups:
        for v in g.variants:
            m = v.measurement
            result = "fits" if v.fits else (f"OOM ({m.oom_phase})" if m is not None and not m.fits else "not measured")
            rows.append([g.name, v.variant, v.description, result, v.step_ms, v.time_added_pct,
                         v.saved_activation_bytes, v.memory_saved_bytes, v.memory_saved_pct, v.peak_allocated_bytes,
                         v.regions_per_step, v.checkpointed_ops_per_step, v.recomputed_ops_per_step,
                         v.kernels_per_step, v.device_idle_share, v.kernel_mean_us, v.recompute_share,
                         v.cpu_ops_per_step])
    return rows


def _region_rows(facts: Facts) -> list[list]:
    g = facts.granularity
    lc = g.launch if g is not None else None
    if lc is None:
        return []
    return [[p.name, p.forward_ops, p.recomputed_ops, p.plain_us, p.checkpoint_us, p.extra_us]
            for p in lc.region_points]


def _whatif_columns(g: GranularityFacts) -> list[Column]:
    pts = g.whatif_launch_us
    return ([Column("workload", key=True), Column("variant", key=True), Column("what-if from", "text"),
             Column("launches/step", "int"), Column("host issue", "ms"), Column("device busy", "ms"),
             Column("step", "ms"), Column("break-even launch", "us", compare=True, predicted=True)]
            + [Column(f"step at {x:g} µs", "ms", compare=True, predicted=True) for x in pts]
            + [Column(f"vs none at {x:g} µs", "pct+", compare=True, predicted=True) for x in pts])


def _whatif_rows(facts: Facts) -> list[list]:
    gr = facts.granularity
    if gr is None:
        return []
    rows = []
    for g in gr.groups:
        for v in g.variants:
            w = v.whatif
            if w is None:
                continue
            rows.append([g.name, v.variant, w.method, w.launches_per_step, w.host_issue_ms, w.device_busy_ms,
                         v.step_ms, v.break_even_launch_us] + list(v.predicted_step_ms)
                        + list(v.predicted_overhead_pct))
    return rows


def _whatif_caption(g: GranularityFacts) -> str:
    lc = g.launch.launch_us if g.launch is not None else None
    prof = ("" if g.profiler_us_per_event is None else
            f" The profiler's own {g.profiler_us_per_event:.2f} µs per recorded event and launches blocked on a "
            "full launch queue are removed from the host time first.")
    return ("Predicted, not measured: each variant's step on a device whose launches cost more host time than the "
            + ("" if lc is None else f"{lc:.2f} µs ") + "measured here, from the max-plus model of its profiled "
            "steps (docs/granularity.md, What-if). Break-even: the launch cost from which the host, not the device, "
            "sets the step; 'vs none' is the checkpointing overhead on such a device." + prof)


def _tables(facts: Facts) -> list[Table]:
    g = facts.granularity
    if g is None:
        return []
    whatif = []
    if any(v.whatif is not None for grp in g.groups for v in grp.variants):
        whatif = [Table("granularity-whatif", _whatif_columns(g), _whatif_rows,
                        title="What-if: step time on a device with costlier launches",
                        caption=_whatif_caption(g))]
    return [Table("granularity", COLUMNS, _rows, caption=BEST_RULE),
            *whatif,
            Table("regions", [Column("region", key=True), Column("forward ops", "int"),
                              Column("recomputed ops", "int"), Column("plain fwd+bwd", "us"),
                              Column("in checkpoint()", "us", compare=True), Column("extra beyond launches", "us")],
                  _region_rows, title="Checkpoint regions timed by the launch-cost microbenchmark", fold=True)]


def _keys(facts: Facts) -> list[Key]:
    g = facts.granularity
    if g is None:
        return []
    out = []
    for grp in g.groups:
        best = best_tradeoff(grp)
        text = (f"{best.variant}: {best.memory_saved_pct:.0f}% of the activations saved for "
                f"{best.time_added_pct:+.0f}% step time" if best is not None
                else f"no variant saves {BEST_MIN_SAVING_PCT:.0f}% of the activations")
        out.append(Key(f"best-{grp.name}", f"best trade-off, {grp.name} (batch {grp.batch_size}, "
                                           f"{grp.n_layers} layers, hidden {grp.hidden_size})", text))
    lc = g.launch
    if lc is not None:
        out += [Key("launch-us", "one kernel launch (back to back, synchronised)", lc.launch_us, "us"),
                Key("enqueue-us", "host enqueue per launch call", lc.enqueue_us, "us"),
                Key("graph-us", "graph replay per op" + (f" ({lc.graph_api})" if lc.graph_api else ""),
                    lc.graph_replay_us_per_op, "us")]
        if lc.region_fixed_us is not None and lc.region_per_op_us is not None:
            out.append(Key("region-us", "host cost per checkpoint region",
                           f"{lc.region_fixed_us:,.0f} µs + {lc.region_per_op_us:,.1f} µs per op inside"))
    e = g.emulation
    if e is not None:
        back = "" if e.readback_extra_us is None else f", read back +{e.readback_extra_us:,.1f} µs"
        out.append(Key("emulated-launch", "emulated launch cost (--emulate-launch-us)",
                       f"+{e.target_us:g} µs of host time per launching op{back} (dispatch mode "
                       f"{e.mode_cost_us or 0:.1f} µs + wait {e.spin_us or 0:.1f} µs)"))
    return out


def _plot(group) -> str:
    pts, labels = [], []
    for v in group.variants:
        if v.time_added_pct is None or v.memory_saved_pct is None:
            continue
        pts.append((v.time_added_pct, v.memory_saved_pct))
        labels.append(v.variant)
    if not pts:
        return ""
    return line_plot([Series(group.name, pts, color_for("gc", 0), labels=labels)], scatter=True,
                     title=f"Memory saved versus time added: {group.name}", x_label="step time added (%)",
                     y_label="activation memory saved (%)", y_from_zero=True)


def _plots(facts: Facts, run_dir: Path | None) -> list[tuple[str, str]]:
    gr = facts.granularity
    if gr is None:
        return []
    return [(_plot(g), f"{g.name}: each point is one granularity at equal batch; up and to the left is better "
                       "(more memory saved for less time).") for g in gr.groups]


def _lead(facts: Facts) -> str:
    g, st = facts.granularity, facts.settings
    if g is None:
        return ""
    return (f"Checkpoint regions from the whole layer down to single ops, at equal batch: median of {g.measure_steps} "
            f"synchronised steps after {g.warmup_steps} warm-up ({st.optimizer}, {st.dtype}); {g.checkpoint_api}. "
            "Kept for backward = allocated after forward and loss minus before the forward (what checkpointing "
            "changes; memory saved is measured on it). Kernels, idle share and recompute share come from the "
            "profiled steps. MFU is not given for the synthetic blocks: the model's FLOP count does not apply.")


def _notes(facts: Facts) -> list[str]:
    g = facts.granularity
    if g is None:
        return []
    return list(g.notes) + (list(g.launch.notes) if g.launch is not None else [])


SECTION = Section(
    id="granularity", title="Checkpoint granularity: memory saved versus time added", facts="granularity",
    present=lambda f: f.granularity is not None and bool(f.granularity.groups or f.granularity.launch),
    lead=_lead, keys=_keys, tables=_tables, plots=_plots, notes=_notes, topics=("granularity", "launch"))
