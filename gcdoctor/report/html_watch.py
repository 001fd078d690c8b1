"""report.html: a watched user training run (gcdoctor.watch) and a `gcdoctor monitor` recording."""
from __future__ import annotations

from gcdoctor.facts import Facts
from gcdoctor.report.format import GIB
from gcdoctor.report.html_parts import (MIB, Raw, bullets, by_unit, fbytes, figure, figures, fnum, generic_block, kv,
                                        section, table)
from gcdoctor.report.svg import PALETTE, Series, color_for, line_plot


def watch_section(facts: Facts) -> str:
    w = facts.watch
    steps = getattr(w, "steps", None) if w is not None else None
    if w is None:
        return ""
    if steps is None:
        return section("watch", "Watched training run", generic_block(w, "watch", facts.unavailable))
    if not steps:
        return ""
    median = getattr(w, "step_ms_median", None)
    peak = getattr(w, "peak_allocated_bytes", None)
    gc = {True: "on", False: "off", None: "not reported by the model"}[w.gradient_checkpointing]
    info = [("model", f"{w.model_name or '—'}, {fnum(w.n_params)} parameters, {w.param_dtype or '—'}"),
            ("gradient checkpointing", gc), ("steps recorded", f"{len(steps)} (profiled: "
                                                                 f"{', '.join(map(str, w.profiled_steps)) or 'none'})"),
            ("step time, median", f"{fnum(median)} ms ({w.timing} timing; first and profiled steps left out)"
             if median is not None else None),
            ("peak allocated", fbytes(peak) if peak is not None else None),
            ("tokens per step", fnum(w.tokens_per_step) if w.tokens_per_step else None),
            ("overhead", w.overhead_note or None)]
    timed = [s for s in steps if s.step_ms is not None]
    step_series = [Series("step time", [(s.index, s.step_ms) for s in timed if not s.profiled], color_for("gc", 0)),
                   Series("profiled", [(s.index, s.step_ms) for s in timed if s.profiled], PALETTE[1])]
    figs = [figure(line_plot([x for x in step_series if x.points], title="Step time per step of the watched run",
                             x_label="step", y_label="ms"),
                   "Profiled steps are shown apart: the profiler slows them.")]
    losses = [(s.index, s.loss) for s in steps if s.loss is not None]
    if losses:
        figs.append(figure(line_plot([Series("loss", losses, PALETTE[2])], title="Loss per step", x_label="step",
                                     y_label="loss", y_from_zero=False), "Loss as the training loop reported it."))
    peaks = [(s.index, s.peak_allocated_bytes) for s in steps if s.peak_allocated_bytes is not None]
    if peaks:
        div, unit = (GIB, "GiB") if max(p for _, p in peaks) >= GIB else (MIB, "MiB")
        figs.append(figure(line_plot([Series("peak allocated", [(i, p / div) for i, p in peaks], PALETTE[3])],
                                     title="Peak memory per step", x_label="step", y_label=unit),
                           "Peak allocated memory of each step."))
    rows = [[s.index, fnum(s.step_ms), None if s.loss is None else f"{s.loss:.5g}", fbytes(s.peak_allocated_bytes),
             fbytes(s.peak_reserved_bytes), "yes" if s.profiled else ""] for s in steps]
    t = table(["step", "step ms", "loss", "peak allocated", "peak reserved", "profiled"], rows, drop_empty=True,
              ids=[f"step:{s.index}" for s in steps])
    return section("watch", "Watched training run", kv([(k, v) for k, v in info if v is not None]), figures(*figs), t,
                   bullets(w.notes, "notes"),
                   lead="Your own training job, step by step, as gcdoctor.watch recorded it.")


def monitor_section(facts: Facts) -> str:
    m = getattr(facts, "monitor", None)
    if m is None:
        return ""
    windows = getattr(m, "windows", None)
    if windows is None:
        return section("monitor", "Monitored job", generic_block(m, "monitor", facts.unavailable))
    if not windows:
        return ""
    names = sorted({k for w in windows for k, v in w.values.items() if v is not None})
    figs = []
    for unit_suffix, title in (("_pct", "Utilisation and CPU (%)"), ("_gbs", "PCIe throughput (GB/s)")):
        series = [Series(n, [(w.t_start_s, w.values[n]) for w in windows if w.values.get(n) is not None],
                         PALETTE[i % len(PALETTE)], markers=False)
                  for i, n in enumerate(x for x in names if x.endswith(unit_suffix))]
        if series:
            figs.append(figure(line_plot(series, title=title, x_label="seconds", y_label=title.split("(")[-1][:-1],
                                         width=1040, height=220), f"Window means ({m.window_s:g} s windows)."))
    procs = table(["device", "pid", "process", "max memory"],
                  [[p.device, p.pid, p.name or "not visible", fbytes(p.max_used_memory_bytes)] for p in m.processes]) \
        if m.processes else ""
    info = kv([("devices", ", ".join(m.devices) or m.device_kind), ("duration", by_unit("duration_s", m.duration_s)),
               ("windows", f"{len(windows)} of {m.window_s:g} s"), ("followed run", m.followed_run or "—")])
    plots = Raw(f'<div class="timeline">{"".join(figs)}</div>') if figs else ""
    return section("monitor", "Monitored job", info, plots, procs,
                   lead="Telemetry of a training job in another process, cut into windows the rules judge.")
