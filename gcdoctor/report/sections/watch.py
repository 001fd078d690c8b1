"""Sections: a watched training run (gcdoctor.watch, the Trainer callback) and a `gcdoctor monitor`
recording of a job in another process."""
from __future__ import annotations

from pathlib import Path

from gcdoctor.facts import Facts, WatchFacts
from gcdoctor.facts.watch import WatchRecompute, WatchStep
from gcdoctor.report.model import GIB, MIB, Column, Key, Section, Table
from gcdoctor.report.svg import PALETTE, Series, color_for, line_plot


TIMING_TEXT = {"events": "device events at phase boundaries, no synchronisation",
               "sync": "synchronised wall clock", "host": "host clock"}
PHASE_KEYS = (("data", "data wait (previous step's end to the first forward)"), ("forward", "forward"),
              ("backward", "backward (with the recompute)"), ("optimizer", "optimizer step"),
              ("host_wait", "host between steps (loading the batch)"))


def _checkpointing_text(w: WatchFacts) -> str:
    """Gradient checkpointing as the model reports it, with the API where it says which."""
    cs = w.checkpointing
    gc = cs.text() if cs.enabled is not None else {True: "on", False: "off", None: "not reported by the model"}[
        w.gradient_checkpointing]
    if cs.api and cs.enabled is not None:
        gc += f" ({cs.api})"
    return gc


def _run_keys(w: WatchFacts) -> list[Key]:
    """The run, its model and how it checkpoints."""
    cs = w.checkpointing
    out = [Key("run", "the run", w.settings_text()),
           Key("model", "model", f"{w.model_name or '—'} ({(w.n_params or 0) / 1e9:.3f} B parameters, "
                                 f"{w.param_dtype or '—'})"),
           Key("gc", "gradient checkpointing (as the model reports)", _checkpointing_text(w))]
    if cs.kwargs:
        out.append(Key("gc-kwargs", "checkpoint function's arguments",
                       ", ".join(f"{k}={v}" for k, v in cs.kwargs.items())))
    return out


def _time_keys(w: WatchFacts) -> list[Key]:
    """The steps, their median time and each phase's."""
    out = [Key("steps", "steps recorded", len(w.steps), "int"),
           Key("profiled", "profiled steps", ", ".join(map(str, w.profiled_steps)) or "none"),
           Key("step-ms", "step time, median (first and profiled steps left out)", w.step_ms_median, "ms"),
           Key("timing", "timing", TIMING_TEXT.get(w.timing, w.timing))]
    for phase, label in PHASE_KEYS:
        v = w.phase_ms_median(phase)
        if v is not None:
            out.append(Key(f"{phase}-ms", f"{label}, median", v, "ms"))
    return out


def _memory_keys(w: WatchFacts) -> list[Key]:
    """The peak, its phase, and what the model states and the activations hold of it."""
    out = [Key("peak", "peak allocated (any step)", w.peak_allocated_bytes, "bytes")]
    if w.peak_phase:
        out.append(Key("peak-phase", "phase of the peak", w.peak_phase))
    if w.model_state_bytes is not None:
        out.append(Key("states", "model states (memory model: params, grads, optimizer states)",
                       w.model_state_bytes, "bytes"))
    if w.activation_peak_bytes is not None:
        out.append(Key("activations", "activations at the peak (peak minus model states)", w.activation_peak_bytes,
                       "bytes"))
    return out


def _recompute_keys(rc: WatchRecompute | None) -> list[Key]:
    """The recomputation the profiled steps show, against the analytic extra forward."""
    if rc is None or not rc.steps:
        return []
    how = ("gcdoctor's labels" if rc.source == "labels" else "found without labels") if rc.found else "none found"
    out = [Key("recompute", "recomputation in the profiled steps",
               f"{how}" + (f", {rc.kind}" if rc.kind else "") +
               (f", {rc.regions_per_step:g} regions per step" if rc.regions_per_step else "")),
           Key("recompute-share", f"recompute share of the step ({rc.time_basis})", rc.share, "share"),
           Key("recompute-ms", "recompute per step", rc.recompute_ms, "ms")]
    if rc.expected_recompute_ms:
        out.append(Key("recompute-expected", "analytic extra forward (one forward of the checkpointed layers)",
                       rc.expected_recompute_ms, "ms"))
        out.append(Key("recompute-ratio", "recompute / analytic extra forward", rc.vs_expected, "x"))
    return out


def _progress_keys(w: WatchFacts) -> list[Key]:
    """Throughput, the loss, the ranks and what watching cost."""
    out = []
    if w.tokens_per_step and w.step_ms_median:
        out.append(Key("tokens", "tokens/s", w.tokens_per_step / (w.step_ms_median / 1e3), "tok/s"))
    losses = [s.loss for s in w.steps if s.loss is not None]
    if losses:
        out.append(Key("loss", "loss, first → last", f"{losses[0]:.4f} → {losses[-1]:.4f}"))
    if w.world_size and w.world_size > 1:
        out.append(Key("rank", "rank", f"{w.rank} of {w.world_size}" if not w.ranks else
                       f"{len(w.ranks)} rank directories merged"))
    if w.overhead_note:
        out.append(Key("overhead", "overhead", w.overhead_note))
    return out


def _watch_keys(facts: Facts) -> list[Key]:
    w = facts.watch
    if w is None:
        return []
    return _run_keys(w) + _time_keys(w) + _memory_keys(w) + _recompute_keys(w.recompute) + _progress_keys(w)


def _watch_rows(facts: Facts) -> list[list]:
    w = facts.watch
    if w is None:
        return []
    return [[s.index, s.step_ms, s.loss, s.data_ms, s.forward_ms, s.backward_ms, s.optimizer_ms,
             s.peak_allocated_bytes, s.peak_phase, s.peak_reserved_bytes, s.profiled]
            for s in w.steps]


def _rank_rows(facts: Facts) -> list[list]:
    w = facts.watch
    if w is None:
        return []
    return [[r.rank, r.steps, r.step_ms_median, r.phase_ms_median.get("host_wait"), r.phase_ms_median.get("data"),
             r.phase_ms_median.get("forward"), r.phase_ms_median.get("backward"), r.phase_ms_median.get("optimizer"),
             r.peak_allocated_bytes] for r in w.ranks]


def _watch_tables(facts: Facts) -> list[Table]:
    w = facts.watch
    if w is None:
        return []
    phases = [Column("data wait", "ms"), Column("forward", "ms"), Column("backward", "ms"), Column("optimizer", "ms")]
    out = [Table("watch-steps", [Column("step", "int", key=True), Column("step", "ms"), Column("loss", "sci"), *phases,
                                 Column("peak allocated", "bytes"), Column("peak phase", "text"),
                                 Column("peak reserved", "bytes"), Column("profiled", "text")],
                 _watch_rows, title="Steps", fold=True,
                 caption="Device time between events at the phase boundaries (host time on the CPU).")]
    if w.ranks:
        out.insert(0, Table("watch-ranks", [Column("rank", "int", key=True), Column("steps", "int"),
                                            Column("step, median", "ms", compare=True),
                                            Column("host wait", "ms", compare=True), Column("data wait", "ms"),
                                            Column("forward", "ms", compare=True), Column("backward", "ms"),
                                            Column("optimizer", "ms"), Column("peak allocated", "bytes")],
                            _rank_rows, title="Ranks", caption="Medians over each rank's unprofiled steps."))
    return out


def _time_figures(steps: list[WatchStep]) -> list[tuple[str, str]]:
    """Step time per step (profiled steps apart) and, where recorded, each phase's."""
    timed = [s for s in steps if s.step_ms is not None]
    series = [Series("step time", [(s.index, s.step_ms) for s in steps if s.step_ms is not None and not s.profiled],
                     color_for("gc", 0)),
              Series("profiled", [(s.index, s.step_ms) for s in steps if s.step_ms is not None and s.profiled],
                     PALETTE[1])]
    figs = [(line_plot([x for x in series if x.points], title="Step time per step of the watched run",
                       x_label="step", y_label="ms"), "Profiled steps are shown apart: the profiler slows them.")]
    phases = [Series(name, [(s.index, v) for s in timed if not s.profiled and (v := s.phase_ms(p)) is not None],
                     PALETTE[i % len(PALETTE)]) for i, (p, name) in enumerate(
                  (("data", "data wait"), ("forward", "forward"), ("backward", "backward"), ("optimizer", "optimizer")))]
    if any(x.points for x in phases):
        figs.append((line_plot([x for x in phases if x.points], title="Phases of each step", x_label="step",
                               y_label="ms"), "Data wait, forward, backward (with the recompute) and optimizer step."))
    return figs


def _watch_plots(facts: Facts, run_dir: Path | None) -> list[tuple[str, str]]:
    w = facts.watch
    if w is None:
        return []
    steps = w.steps
    figs = _time_figures(steps)
    losses: list[tuple[float, float]] = [(s.index, s.loss) for s in steps if s.loss is not None]
    if losses:
        figs.append((line_plot([Series("loss", losses, PALETTE[2])], title="Loss per step", x_label="step",
                               y_label="loss", y_from_zero=False), "Loss as the training loop reported it."))
    peaks = [(s.index, s.peak_allocated_bytes) for s in steps if s.peak_allocated_bytes is not None]
    if peaks:
        div, unit = (GIB, "GiB") if max(p for _, p in peaks) >= GIB else (MIB, "MiB")
        figs.append((line_plot([Series("peak allocated", [(i, p / div) for i, p in peaks], PALETTE[3])],
                               title="Peak memory per step", x_label="step", y_label=unit),
                     "Peak allocated memory of each step."))
    return figs


WATCH = Section(
    id="watch", title="Your training run (watched)", facts="watch",
    present=lambda f: f.watch is not None and bool(f.watch.steps),
    lead=lambda f: "Your own training job, step by step, as gcdoctor.watch recorded it.",
    keys=_watch_keys, plots=_watch_plots, notes=lambda f: list(f.watch.notes) if f.watch is not None else [],
    topics=("watch",), tables=_watch_tables)


def _monitor_keys(facts: Facts) -> list[Key]:
    m = facts.monitor
    if m is None:
        return []
    return [Key("devices", "devices", ", ".join(m.devices) or m.device_kind),
            Key("duration", "duration", m.duration_s, "s"),
            Key("windows", "windows", f"{len(m.windows)} of {m.window_s:g} s"),
            Key("followed", "followed run", m.followed_run or "—")]


def _monitor_plots(facts: Facts, run_dir: Path | None) -> list[tuple[str, str]]:
    m = facts.monitor
    if m is None:
        return []
    names = sorted({k for w in m.windows for k, v in w.values.items() if v is not None})
    figs = []
    for suffix, title in (("_pct", "Utilisation and CPU (%)"), ("_gbs", "PCIe throughput (GB/s)")):
        series = [Series(n, [(w.t_start_s, v) for w in m.windows if (v := w.values.get(n)) is not None],
                         PALETTE[i % len(PALETTE)], markers=False)
                  for i, n in enumerate(x for x in names if x.endswith(suffix))]
        if series:
            figs.append((line_plot(series, title=title, x_label="seconds", y_label=title.split("(")[-1][:-1],
                                   width=1040, height=220), f"Window means ({m.window_s:g} s windows)."))
    return figs


def _process_rows(facts: Facts) -> list[list]:
    m = facts.monitor
    if m is None:
        return []
    return [[p.device, p.pid, p.name or "not visible", p.max_used_memory_bytes] for p in m.processes]


MONITOR = Section(
    id="monitor", title="Monitored job", facts="monitor",
    present=lambda f: f.monitor is not None and bool(f.monitor.windows),
    lead=lambda f: "Telemetry of a training job in another process, cut into windows the rules judge.",
    keys=_monitor_keys, plots=_monitor_plots, topics=("monitor",), wide_plots=True,
    tables=lambda f: [Table("monitor-processes", [Column("device", key=True), Column("pid", "int", key=True),
                                                  Column("process", "text"), Column("max memory", "bytes")],
                            _process_rows, title="Processes on the devices")])
