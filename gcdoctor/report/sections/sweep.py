"""Section: the batch sweep (layer checkpointing off and on: largest batch, step time, peak memory)."""
from __future__ import annotations

import json
from pathlib import Path

from gcdoctor.facts import Facts, Measurement, SweepFacts
from gcdoctor.facts.sweep import SnapshotFacts
from gcdoctor.facts.views import EqualBatch, memory_limit_bytes
from gcdoctor.report.model import GIB, MIB, Column, Key, Section, Table, format_value
from gcdoctor.report.svg import HLine, Mark, Series, color_for, line_plot

VARIANT_TEXT = {"no_gc": "without checkpointing", "gc": "with checkpointing"}


def variants_of(s: SweepFacts) -> list[str]:
    seen = list(dict.fromkeys([m.variant for m in s.measurements] + [t.variant for t in s.trials]
                              + list(s.max_batch)))
    return sorted(seen, key=lambda v: ({"no_gc": 0, "gc": 1}.get(v, 2), v))


def max_batch_text(s: SweepFacts, variant: str) -> str:
    b = s.max_batch.get(variant)
    if variant not in s.max_batch:
        return "not searched"
    if b is None:
        return "none fits" if s.searched else "none of the fixed batch sizes fits"
    if not s.searched:
        return f"{b} (largest of the fixed --batch-sizes; the boundary was not searched)"
    return f"≥ {b} (search capped)" if s.max_batch_capped.get(variant) else str(b)


def first_oom(s: SweepFacts, variant: str) -> tuple[int, str | None] | None:
    """The smallest batch that ran out of memory, and in which phase."""
    fails = [(m.batch_size, m.oom_phase) for m in s.measurements if m.variant == variant and not m.fits]
    fails += [(t.batch_size, t.oom_phase) for t in s.trials if t.variant == variant and not t.fits]
    return min(fails, key=lambda f: f[0]) if fails else None


def _max_batch_keys(s: SweepFacts) -> list[Key]:
    """Each variant's largest batch (and its first OOM), and what checkpointing gained."""
    out: list[Key] = []
    for v in variants_of(s):
        if v in s.max_batch:
            oom = first_oom(s, v)
            where = f"; out of memory at {oom[0]} ({oom[1] or 'phase unknown'})" if oom else ""
            out.append(Key(f"max-batch-{v}", f"largest batch {VARIANT_TEXT.get(v, v)}", max_batch_text(s, v) + where))
    off, on = s.max_batch.get("no_gc"), s.max_batch.get("gc")
    if off and on and s.searched:
        out.append(Key("max-batch-gain", "batch gain from checkpointing", on / off, "x"))
    return out


def _equal_batch_keys(s: SweepFacts) -> list[Key]:
    """Both variants at the largest batch both measured: step time, activations and peak saved."""
    common = s.common_batches()
    if not common:
        return []
    b = common[-1]
    out = [Key("equal-batch", "compared at equal batch", b, "int")]
    m_off, m_on = s.get("no_gc", b), s.get("gc", b)
    if m_off is None or m_on is None:  # common_batches holds only batches both measured and fitting
        return out
    if m_off.step_ms_median and m_on.step_ms_median:
        out.append(Key("step-ms-no_gc", "step time without checkpointing", m_off.step_ms_median, "ms"))
        out.append(Key("step-ms-gc", "step time with checkpointing", m_on.step_ms_median, "ms"))
        out.append(Key("overhead", "checkpointing's step-time overhead",
                       EqualBatch(b, m_off, m_on).overhead_pct, "pct+"))
    a_off, a_on = m_off.activation_peak_bytes, m_on.activation_peak_bytes
    if a_off and a_on is not None:
        out.append(Key("activations-no_gc", "activation memory without checkpointing", a_off, "bytes"))
        out.append(Key("activations-gc", "activation memory with checkpointing", a_on, "bytes"))
        out.append(Key("activation-saving", "activation memory saved", EqualBatch(b, m_off, m_on).activation_saving_pct,
                       "pct"))
    if m_off.peak_allocated_bytes and m_on.peak_allocated_bytes is not None:
        out.append(Key("peak-saving", "total peak saved", 100 * (1 - m_on.peak_allocated_bytes
                                                                 / m_off.peak_allocated_bytes), "pct"))
    return out


def _search_keys(s: SweepFacts) -> list[Key]:
    """Throughput at each largest batch, how each boundary was searched, and the sweep's wall time."""
    out: list[Key] = []
    for v in variants_of(s):
        b = s.max_batch.get(v)
        m = s.get(v, b) if b else None
        if m is not None and m.tokens_per_s:
            out.append(Key(f"tokens-{v}", f"tokens/s at the largest batch, {v}", m.tokens_per_s, "tok/s"))
    for v, how in s.strategy.items():
        n = sum(1 for t in s.trials if t.variant == v)
        guess = s.predicted_max_batch.get(v)
        text = f"{how}" + (f" from {guess}" if guess else "") + f": {n} trials, {s.search_ooms.get(v, 0)} OOM"
        if s.search_seconds.get(v) is not None:
            text += f", {s.search_seconds[v]:.0f} s"
        out.append(Key(f"search-{v}", f"search, {v}", text, compare=False))
    if s.wall_s is not None:
        out.append(Key("sweep-wall", "sweep wall time", s.wall_s, "s"))
    return out


def _keys(facts: Facts) -> list[Key]:
    s = facts.sweep
    if s is None:
        return []
    return _max_batch_keys(s) + _equal_batch_keys(s) + _search_keys(s)


SWEEP_COLUMNS = [Column("variant", key=True), Column("batch", "int", key=True), Column("result", "text"),
                 Column("step", "ms", compare=True), Column("spread", "text"), Column("throughput", "tok/s", compare=True),
                 Column("MFU", "share", compare=True), Column("peak allocated", "bytes", compare=True),
                 Column("peak reserved", "bytes"), Column("activations", "bytes", compare=True),
                 Column("peak phase", "text"), Column("predicted peak", "bytes")]


def _sorted_measurements(facts: Facts) -> list[Measurement]:
    """The sweep's measurements, without checkpointing first, by batch."""
    s = facts.sweep
    return sorted(s.measurements, key=lambda m: (m.variant != "no_gc", m.batch_size)) if s is not None else []


def sweep_rows(facts: Facts) -> list[list]:
    rows = []
    for m in _sorted_measurements(facts):
        if not m.fits:
            kind = f", {m.oom.kind}" if m.oom is not None and m.oom.kind != "unknown" else ""
            rows.append([m.variant, m.batch_size, f"OOM ({m.oom_phase}{kind})"] + [None] * 8 + [m.predicted_peak_bytes])
            continue
        spread = f"{min(m.step_ms):.1f}–{max(m.step_ms):.1f}" if m.step_ms else None
        rows.append([m.variant, m.batch_size, "fits", m.step_ms_median, spread, m.tokens_per_s, m.mfu,
                     m.peak_allocated_bytes, m.peak_reserved_bytes, m.activation_peak_bytes, m.peak_phase,
                     m.predicted_peak_bytes])
    return rows


def _phase_rows(facts: Facts) -> list[list]:
    return [[m.variant, m.batch_size, m.forward_ms_median, m.backward_ms_median, m.optimizer_ms_median, m.param_bytes,
             m.grad_bytes, m.optimizer_state_bytes, m.activation_after_forward_bytes]
            for m in _sorted_measurements(facts) if m.fits]


def _trial_rows(facts: Facts) -> list[list]:
    return [[t.variant, t.batch_size, t.fits, t.peak_allocated_bytes, t.oom_phase, t.oom_kind, t.seconds]
            for t in (facts.sweep.trials if facts.sweep is not None else [])]


def _oom_rows(facts: Facts) -> list[list]:
    """Each OOM read and classified (gcdoctor.backends.oom)."""
    return [[m.variant, m.batch_size, m.oom.phase, m.oom.kind, m.oom.request_bytes, m.oom.allocated_bytes,
             m.oom.reserved_unallocated_bytes, m.oom.headroom_bytes, m.oom.spelling]
            for m in _sorted_measurements(facts) if not m.fits and m.oom is not None]


def _snapshot(facts: Facts) -> SnapshotFacts | None:
    return facts.sweep.snapshot if facts.sweep is not None else None


def _snapshot_rows(facts: Facts) -> list[list]:
    snap = _snapshot(facts)
    if snap is None:
        return []
    total = sum(snap.by_kind_bytes.values()) or 1
    return [[k, v, 100.0 * v / total] for k, v in sorted(snap.by_kind_bytes.items(), key=lambda kv: -kv[1])]


def _largest_rows(facts: Facts) -> list[list]:
    snap = _snapshot(facts)
    return [[i + 1, t.bytes, t.kind, t.frame] for i, t in enumerate(snap.largest)] if snap is not None else []


def _tables(facts: Facts) -> list[Table]:
    s = facts.sweep
    if s is None:
        return []
    snap = s.snapshot
    return [
        Table("sweep", SWEEP_COLUMNS, sweep_rows),
        Table("phases", [Column("variant", key=True), Column("batch", "int", key=True),
                         Column("forward+loss", "ms", compare=True), Column("backward", "ms", compare=True),
                         Column("optimizer", "ms", compare=True), Column("parameters", "bytes"),
                         Column("gradients", "bytes"), Column("optimizer states", "bytes"),
                         Column("activations after forward", "bytes")], _phase_rows,
              title="Phases and model states per measurement", fold=True),
        Table("trials", [Column("variant", key=True), Column("batch", "int", key=True), Column("fits", "text"),
                         Column("peak allocated", "bytes"), Column("OOM phase", "text"), Column("OOM kind", "text"),
                         Column("seconds", "s")], _trial_rows,
              title=f"Batch search: {len(s.trials)} trials", fold=True),
    ] + ([Table("ooms", [Column("variant", key=True), Column("batch", "int", key=True), Column("phase", "text"),
                         Column("kind", "text"), Column("request", "bytes"), Column("allocated", "bytes"),
                         Column("cached, unallocated", "bytes"), Column("device could still give", "bytes"),
                         Column("spelling", "text")], _oom_rows,
                title="Out-of-memory errors, read from the allocator at the failure",
                caption="fragmentation: the cached free bytes held the request, not in one block; mixed: cache and "
                        "free device memory together held it; capacity: allocated plus the request exceed what the "
                        "process can have.")] if any(not m.fits and m.oom for m in s.measurements) else []
    ) + ([Table("snapshot", [Column("kind", key=True), Column("live at the peak", "bytes", compare=True),
                              Column("share", "pct")], _snapshot_rows,
                title=f"Memory snapshot: what is alive at the peak ({snap.variant}, batch {snap.batch_size})",
                caption=f"{snap.path}: open at pytorch.org/memory_viz."),
          Table("snapshot-largest", [Column("#", "int", key=True), Column("bytes", "bytes"), Column("kind", "text"),
                                     Column("allocated at", "text")], _largest_rows,
                title="Largest tensors alive at the peak", fold=True)] if snap else [])


def memory_limit(facts: Facts, run_dir: Path | None) -> tuple[int, str] | None:
    """The wall the search ran into: an injected --memory-limit, else the device's memory."""
    cfg = None
    if run_dir is not None:
        try:
            cfg = json.loads((Path(run_dir) / "config.json").read_text())
        except (OSError, ValueError):
            cfg = None
    lim = memory_limit_bytes(facts, cfg)
    if lim is not None:
        return lim, "memory limit"
    if facts.environment.total_memory_bytes:
        return facts.environment.total_memory_bytes, ("memory limit" if facts.environment.device_kind == "cpu"
                                                      else "device memory")
    return None


def _all_peaks(s: SweepFacts) -> list[int]:
    return [m.peak_allocated_bytes for m in s.measurements if m.peak_allocated_bytes] + \
           [t.peak_allocated_bytes for t in s.trials if t.peak_allocated_bytes]


def _measured_peaks(s: SweepFacts, variant: str) -> dict[int, int]:
    """Batch -> peak allocated of one variant: the fitting measurements', else the search trials'."""
    pts = {m.batch_size: m.peak_allocated_bytes for m in s.measurements
           if m.variant == variant and m.fits and m.peak_allocated_bytes}
    for t in s.trials:
        if t.variant == variant and t.fits and t.peak_allocated_bytes and t.batch_size not in pts:
            pts[t.batch_size] = t.peak_allocated_bytes
    return pts


def _predicted_peaks(facts: Facts, s: SweepFacts, variant: str) -> dict[int, int]:
    """Batch -> predicted peak of one variant: the measurements' predictions, else the memory model's points."""
    pred = {m.batch_size: m.predicted_peak_bytes for m in s.measurements
            if m.variant == variant and m.predicted_peak_bytes}
    for p in getattr(facts.memory_model, "points", None) or []:
        if p.variant == variant and p.peak_bytes and p.batch_size not in pred:
            pred[p.batch_size] = p.peak_bytes
    return pred


def _peak_curves(facts: Facts, s: SweepFacts, div: float, oom_y: float) -> tuple[list[Series], list[Mark]]:
    """Each variant's measured peaks, its predicted ones (dashed) and its first OOM marked at `oom_y`."""
    series: list[Series] = []
    marks: list[Mark] = []
    for i, v in enumerate(variants_of(s)):
        color = color_for(v, i)
        series.append(Series(v, [(b, p / div) for b, p in _measured_peaks(s, v).items()], color))
        pred = _predicted_peaks(facts, s, v)
        if pred:
            series.append(Series(f"{v} predicted", [(b, p / div) for b, p in pred.items()], color, dashed=True,
                                 markers=False))
        oom = first_oom(s, v)
        if oom:
            # alternate labels above and below the limit line so two OOM points never overprint
            marks.append(Mark(oom[0], oom_y, f"{v} OOM at {oom[0]}", color=color,
                              dy=-7.0 if len(marks) % 2 == 0 else 16.0))
    return series, marks


def _memory_plot(facts: Facts, limit: tuple[int, str] | None) -> str:
    s = facts.sweep
    if s is None:
        return ""
    all_peaks = _all_peaks(s)
    any_oom = any(first_oom(s, v) for v in variants_of(s))
    # a limit far above every peak would squash the curves flat: draw it only where it matters
    drawn = limit if limit is not None and (any_oom or max(all_peaks, default=0) >= 0.25 * limit[0]) else None
    top = max(all_peaks + ([drawn[0]] if drawn else []), default=0)
    unit, div = ("GiB", GIB) if top >= GIB else ("MiB", MIB)
    series, marks = _peak_curves(facts, s, div, (drawn[0] if drawn else top) / div)
    hlines = [HLine(drawn[0] / div, f"{drawn[1]} {drawn[0] / div:,.2f} {unit}")] if drawn else []
    return line_plot(series, title="Peak allocated memory versus batch size", x_label="batch size (log scale)",
                     y_label=f"peak allocated ({unit})", x_log2=True, marks=marks, hlines=hlines)


def _metric_plot(s: SweepFacts, attr: str, title: str, y_label: str) -> str:
    series = []
    for i, v in enumerate(variants_of(s)):
        pts: list[tuple[float, float]] = [(m.batch_size, getattr(m, attr)) for m in s.measurements
                                          if m.variant == v and m.fits and getattr(m, attr) is not None]
        series.append(Series(v, pts, color_for(v, i)))
    return line_plot(series, title=title, x_label="batch size (log scale)", y_label=y_label, x_log2=True)


def _plots(facts: Facts, run_dir: Path | None) -> list[tuple[str, str]]:
    s = facts.sweep
    if s is None:
        return []
    limit = memory_limit(facts, run_dir)
    caption = "Peak allocated memory per step; × marks the smallest batch that ran out of memory."
    if any(m.predicted_peak_bytes for m in s.measurements) or getattr(facts.memory_model, "points", None):
        caption += " Dashed: the memory model's prediction."
    peaks = [m.peak_allocated_bytes for m in s.measurements if m.peak_allocated_bytes]
    if limit and peaks and not any(first_oom(s, v) for v in variants_of(s)) and max(peaks) < 0.25 * limit[0]:
        caption += f" The {limit[1]} ({format_value(limit[0], 'bytes')}) is far above every peak and not drawn."
    return [(_memory_plot(facts, limit), caption),
            (_metric_plot(s, "step_ms_median", "Step time versus batch size", "median step (ms)"),
             "Median step time (forward, loss, backward, optimizer), unprofiled."),
            (_metric_plot(s, "tokens_per_s", "Throughput versus batch size", "tokens/s"),
             "Tokens per second = batch × sequence / median step.")]


def _lead(facts: Facts) -> str:
    s, st = facts.sweep, facts.settings
    if s is None:
        return ""
    return (f"Checkpointing off (no_gc) and layer-level on (gc{', ' + s.gc_api if s.gc_api else ''}); each point is "
            f"the median of {st.measure_steps} synchronised steps after {st.warmup_steps} warm-up (forward, loss, "
            f"backward, {st.optimizer} step), sequence {st.seq_len}, {st.dtype}. Activations = peak minus model "
            "states (parameters, gradients, optimizer states).")


SECTION = Section(
    id="sweep", title="Batch sweep: checkpointing off and on", facts="sweep",
    present=lambda f: f.sweep is not None and bool(f.sweep.measurements or f.sweep.trials),
    lead=_lead, keys=_keys, tables=_tables, plots=_plots, topics=("sweep", "prescription"))
