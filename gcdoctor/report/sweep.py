"""Rows of the batch-sweep table, shared by the Markdown, console and HTML writers."""
from __future__ import annotations

from gcdoctor.facts import Facts
from gcdoctor.report.format import gib, num

SWEEP_HEADERS = ["variant", "batch", "step ms (median)", "spread ms", "tokens/s", "MFU", "peak alloc GiB",
                 "peak reserved GiB", "activations GiB", "peak phase", "predicted GiB"]


def sweep_rows(facts: Facts) -> list[list[str]]:
    rows = []
    for m in sorted(facts.sweep.measurements, key=lambda m: (m.variant != "no_gc", m.batch_size)):
        if not m.fits:
            rows.append([m.variant, m.batch_size, f"OOM ({m.oom_phase})", "", "", "", "", "", "", "",
                         gib(m.predicted_peak_bytes)])
            continue
        spread = f"{min(m.step_ms):.1f}–{max(m.step_ms):.1f}" if m.step_ms else "—"
        rows.append([m.variant, m.batch_size, num(m.step_ms_median), spread, num(m.tokens_per_s, 0),
                     "—" if m.mfu is None else f"{100 * m.mfu:.1f}%", gib(m.peak_allocated_bytes),
                     gib(m.peak_reserved_bytes), gib(m.activation_peak_bytes), m.peak_phase or "—",
                     gib(m.predicted_peak_bytes)])
    return rows
