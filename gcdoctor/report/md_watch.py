"""Markdown section of a watched user run (gcdoctor.watch / the Trainer callback)."""
from __future__ import annotations

from gcdoctor.engine import Verdict
from gcdoctor.facts import Facts
from gcdoctor.report.format import gib, md_table, num


def watch_section(facts: Facts, verdicts: list[Verdict]) -> str:
    w = facts.watch
    if w is None or not w.steps:
        return ""
    times = w.step_times()
    losses = [s.loss for s in w.steps if s.loss is not None]
    rows = [["steps recorded", len(w.steps)],
            ["step time, median (unprofiled, first step excluded)", f"{num(w.step_ms_median)} ms"],
            ["step time, min–max", f"{num(min(times))}–{num(max(times))} ms" if times else "—"],
            ["timing", {"events": "device events at step boundaries, no synchronisation",
                        "sync": "synchronised wall clock", "host": "host clock"}.get(w.timing, w.timing)],
            ["peak allocated (any step)", f"{gib(w.peak_allocated_bytes)} GiB"],
            ["loss, first → last", f"{losses[0]:.4f} → {losses[-1]:.4f}" if losses else "—"],
            ["profiled steps", ", ".join(map(str, w.profiled_steps)) or "none"],
            ["model", f"{w.model_name} ({(w.n_params or 0) / 1e9:.3f} B params, {w.param_dtype})"],
            ["gradient checkpointing (as the model reports)", {True: "on", False: "off"}.get(w.gradient_checkpointing, "unknown")]]
    if w.tokens_per_step and w.step_ms_median:
        rows.append(["tokens/s", num(w.tokens_per_step / (w.step_ms_median / 1e3), 0)])
    return "\n".join(["## Your training run (watched)", "", md_table(["", ""], rows)])
