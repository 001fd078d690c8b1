"""report.html: the batch-sweep section (max batch, peak memory, step time, tokens/s vs batch)."""
from __future__ import annotations

from gcdoctor.facts import Facts, SweepFacts
from gcdoctor.report.format import GIB
from gcdoctor.report.html_parts import MIB, Raw, details, fbytes, figure, figures, fnum, fpct, section, table
from gcdoctor.report.svg import HLine, Mark, Series, color_for, line_plot
from gcdoctor.report.sweep import SWEEP_HEADERS, sweep_rows

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


def equal_batch(s: SweepFacts):
    common = s.common_batches()
    if not common:
        return None
    b = common[-1]
    return b, s.get("no_gc", b), s.get("gc", b)


def key_numbers(facts: Facts) -> list[tuple[str, str, str]]:
    """(row id, label, value) of the sweep's headline numbers, shown at the top of the section."""
    s = facts.sweep
    rows: list[tuple[str, str, str]] = []
    for v in variants_of(s):
        if v in s.max_batch:
            oom = first_oom(s, v)
            where = f"; out of memory at {oom[0]} ({oom[1] or 'phase unknown'})" if oom else ""
            rows.append((f"max-batch-{v}", f"largest batch {VARIANT_TEXT.get(v, v)}", max_batch_text(s, v) + where))
    off, on = s.max_batch.get("no_gc"), s.max_batch.get("gc")
    if off and on and s.searched:
        rows.append(("max-batch-gain", "batch gain from checkpointing", f"{on / off:.2f}x"))
    pair = equal_batch(s)
    if pair:
        b, m_off, m_on = pair
        rows.append(("equal-batch", "compared at equal batch", str(b)))
        if m_off.step_ms_median and m_on.step_ms_median:
            pct = 100 * (m_on.step_ms_median / m_off.step_ms_median - 1)
            rows.append(("step-ms", "step time, no_gc → gc",
                         f"{fnum(m_off.step_ms_median)} ms → {fnum(m_on.step_ms_median)} ms ({pct:+.1f}%)"))
        a_off, a_on = m_off.activation_peak_bytes, m_on.activation_peak_bytes
        if a_off and a_on is not None:
            rows.append(("activation-saving", "activation memory, no_gc → gc",
                         f"{fbytes(a_off)} → {fbytes(a_on)} ({fpct(100 * (1 - a_on / a_off), 1)} saved)"))
        if m_off.peak_allocated_bytes and m_on.peak_allocated_bytes is not None:
            rows.append(("peak", "peak allocated, no_gc → gc",
                         f"{fbytes(m_off.peak_allocated_bytes)} → {fbytes(m_on.peak_allocated_bytes)} "
                         f"({fpct(100 * (1 - m_on.peak_allocated_bytes / m_off.peak_allocated_bytes), 1)} saved)"))
    for v in variants_of(s):
        b = s.max_batch.get(v)
        m = s.get(v, b) if b else None
        if m is not None and m.tokens_per_s:
            rows.append((f"tokens-{v}", f"tokens/s at the largest batch, {v}", f"{fnum(m.tokens_per_s, 0)} tok/s"))
    return rows


def _memory_plot(facts: Facts, limit: tuple[int, str] | None) -> str:
    s = facts.sweep
    all_peaks = [m.peak_allocated_bytes for m in s.measurements if m.peak_allocated_bytes] + \
                [t.peak_allocated_bytes for t in s.trials if t.peak_allocated_bytes]
    any_oom = any(first_oom(s, v) for v in variants_of(s))
    # a limit far above every peak would squash the curves flat: draw it only where it matters
    draw_limit = limit is not None and (any_oom or max(all_peaks, default=0) >= 0.25 * limit[0])
    top = max(all_peaks + ([limit[0]] if draw_limit else []), default=0)
    unit, div = ("GiB", GIB) if top >= GIB else ("MiB", MIB)
    series, marks = [], []
    for i, v in enumerate(variants_of(s)):
        pts = {m.batch_size: m.peak_allocated_bytes for m in s.measurements
               if m.variant == v and m.fits and m.peak_allocated_bytes}
        for t in s.trials:
            if t.variant == v and t.fits and t.peak_allocated_bytes and t.batch_size not in pts:
                pts[t.batch_size] = t.peak_allocated_bytes
        color = color_for(v, i)
        series.append(Series(v, [(b, p / div) for b, p in pts.items()], color))
        pred = {m.batch_size: m.predicted_peak_bytes for m in s.measurements
                if m.variant == v and m.predicted_peak_bytes}
        mm = facts.memory_model
        for p in getattr(mm, "points", None) or []:
            if p.variant == v and p.peak_bytes and p.batch_size not in pred:
                pred[p.batch_size] = p.peak_bytes
        if pred:
            series.append(Series(f"{v} predicted", [(b, p / div) for b, p in pred.items()], color, dashed=True,
                                 markers=False))
        oom = first_oom(s, v)
        if oom:
            y = (limit[0] if limit and draw_limit else top) / div
            # alternate labels above and below the limit line so two OOM points never overprint
            marks.append(Mark(oom[0], y, f"{v} OOM at {oom[0]}", color=color, dy=-7.0 if len(marks) % 2 == 0 else 16.0))
    hlines = [HLine(limit[0] / div, f"{limit[1]} {limit[0] / div:,.2f} {unit}")] if draw_limit else []
    return line_plot(series, title="Peak allocated memory versus batch size", x_label="batch size (log scale)",
                     y_label=f"peak allocated ({unit})", x_log2=True, marks=marks, hlines=hlines)


def _metric_plot(facts: Facts, attr: str, title: str, y_label: str) -> str:
    s = facts.sweep
    series = []
    for i, v in enumerate(variants_of(s)):
        pts = [(m.batch_size, getattr(m, attr)) for m in s.measurements if m.variant == v and m.fits
               and getattr(m, attr) is not None]
        series.append(Series(v, pts, color_for(v, i)))
    return line_plot(series, title=title, x_label="batch size (log scale)", y_label=y_label, x_log2=True)


def memory_limit(facts: Facts, config: dict | None) -> tuple[int, str] | None:
    """The wall the search ran into: an injected --memory-limit, else the device's memory."""
    lim = (config or {}).get("memory_limit_bytes")
    if isinstance(lim, int) and lim > 0:
        return lim, "memory limit"
    if facts.environment.total_memory_bytes:
        return facts.environment.total_memory_bytes, ("memory limit" if facts.environment.device_kind == "cpu"
                                                      else "device memory")
    return None


def sweep_section(facts: Facts, config: dict | None = None) -> str:
    s = facts.sweep
    if s is None or not (s.measurements or s.trials):
        return ""
    st = facts.settings
    lead = (f"Checkpointing off (no_gc) and layer-level on (gc{', ' + s.gc_api if s.gc_api else ''}); "
            f"each point is the median of {st.measure_steps} synchronised steps after {st.warmup_steps} warm-up, "
            f"sequence {st.seq_len}, {st.dtype}, {st.optimizer}. Activations = peak minus model states.")
    rows = key_numbers(facts)
    keys = table(["", "value"], [[label, value] for _, label, value in rows], css="key-numbers",
                 ids=[rid for rid, _, _ in rows])
    limit = memory_limit(facts, config)
    caption = "Peak allocated memory per step; × marks the smallest batch that ran out of memory."
    if any(m.predicted_peak_bytes for m in s.measurements) or getattr(facts.memory_model, "points", None):
        caption += " Dashed: the memory model's prediction."
    peaks = [m.peak_allocated_bytes for m in s.measurements if m.peak_allocated_bytes]
    if limit and peaks and not any(first_oom(s, v) for v in variants_of(s)) and max(peaks) < 0.25 * limit[0]:
        caption += f" The {limit[1]} ({fbytes(limit[0])}) is far above every peak and not drawn."
    plots = figures(
        figure(_memory_plot(facts, limit), caption),
        figure(_metric_plot(facts, "step_ms_median", "Step time versus batch size", "median step (ms)"),
               "Median step time (forward, loss, backward, optimizer), unprofiled."),
        figure(_metric_plot(facts, "tokens_per_s", "Throughput versus batch size", "tokens/s"),
               "Tokens per second = batch × sequence / median step."),
    )
    srows = sweep_rows(facts)
    ordered = sorted(s.measurements, key=lambda m: (m.variant != "no_gc", m.batch_size))
    main = table(SWEEP_HEADERS, srows, css="sweep", numeric_from=1,
                 ids=[f"{m.variant}:{m.batch_size}" for m in ordered])
    trials = ""
    if s.trials:
        trials = details(f"Batch search: {len(s.trials)} trials", table(
            ["variant", "batch", "fits", "peak allocated", "OOM phase"],
            [[t.variant, t.batch_size, "yes" if t.fits else "no", fbytes(t.peak_allocated_bytes),
              t.oom_phase or ""] for t in s.trials]))
    phases = _phase_table(facts)
    return section("sweep", "Batch sweep: checkpointing off and on", keys, plots, main, phases, trials, lead=lead)


def _phase_table(facts: Facts) -> Raw:
    rows = []
    for m in sorted(facts.sweep.measurements, key=lambda m: (m.variant != "no_gc", m.batch_size)):
        if not m.fits:
            continue
        rows.append([m.variant, m.batch_size, fnum(m.forward_ms_median), fnum(m.backward_ms_median),
                     fnum(m.optimizer_ms_median), fbytes(m.param_bytes), fbytes(m.grad_bytes),
                     fbytes(m.optimizer_state_bytes), fbytes(m.activation_after_forward_bytes)])
    return details("Phases and model states per measurement", table(
        ["variant", "batch", "forward+loss ms", "backward ms", "optimizer ms", "params", "grads",
         "optimizer states", "activations after forward"], rows)) if rows else Raw("")

