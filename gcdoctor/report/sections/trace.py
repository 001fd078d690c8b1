"""Sections: the profiled traces' metrics, and what profiling added to the step time."""
from __future__ import annotations

from gcdoctor.facts import Facts
from gcdoctor.report.model import Column, Section, Table

TRACE_COLUMNS = [Column("trace window", key=True), Column("host wall", "ms"), Column("CPU ops", "int"),
                 Column("device busy", "share", compare=True), Column("kernels", "int", compare=True),
                 Column("mean kernel", "us", compare=True), Column("idle waiting on host", "ms", compare=True),
                 Column("memcpy", "ms"), Column("copy hidden", "share"), Column("recompute share", "share", compare=True)]


def _row(key: str, t) -> list:
    ms = lambda us: None if us is None else us / 1e3  # noqa: E731
    h = t.host_idle  # the host rules' window: one busy figure for the window everywhere
    busy = h.busy_us / h.window_us if h is not None and h.window_us else t.busy_share
    return [key, ms(t.wall_us), t.cpu_op_count, busy, t.kernel_count, t.kernel_mean_us,
            ms(t.idle_host_wait_us), ms(t.copy_time_us), t.copy_overlap_share, t.recompute_share]


def _tables(facts: Facts) -> list[Table]:
    main = {k: t for k, t in facts.trace.items() if "|" not in k}
    windows = {k: t for k, t in facts.trace.items() if "|" in k}
    out = [Table("trace", TRACE_COLUMNS, lambda f: [_row(k, t) for k, t in main.items()])]
    if windows:
        out.append(Table("trace-windows", TRACE_COLUMNS, lambda f: [_row(k, t) for k, t in windows.items()],
                         title=f"{len(windows)} labelled windows (forward, backward, recompute, optimizer, steps)",
                         fold=True))
    return out


def _notes(facts: Facts) -> list[str]:
    reasons = sorted({t.device_unavailable for t in facts.trace.values() if t.device_unavailable})
    out = [f"Device metrics unavailable: {r}" for r in reasons]
    for key, t in facts.trace.items():
        n = getattr(t, "dropped_events", 0)
        if "|" not in key and isinstance(n, int) and n > 0:
            why = "; ".join(f"{c:,} with {r}" for r, c in sorted((t.dropped or {}).items(), key=lambda kv: -kv[1])
                            if isinstance(c, int))
            out.append(f"{key}: {n:,} impossible or unplaceable events left out of the trace"
                       + (f" ({why})" if why else ""))
    sources = sorted({t.source for t in facts.trace.values() if t.source})
    if sources:
        out.append("Traces (open in ui.perfetto.dev): " + ", ".join(sources))
    return out


TRACE = Section(
    id="trace", title="Profiler traces", facts="trace", present=lambda f: bool(f.trace),
    lead=lambda f: "Two profiled steps per variant (or your own trace); times from the trace, not the wall clock.",
    tables=_tables, notes=_notes, topics=("trace",))

PROFILER = Section(
    id="profiler-overhead", title="Profiler overhead", facts="profiler_overhead",
    present=lambda f: bool(f.profiler_overhead),
    lead=lambda f: "Verdicts use the unprofiled step times; this is what profiling added.",
    tables=lambda f: [Table("profiler-overhead", [Column("window", key=True), Column("batch", "int", key=True),
                                                  Column("unprofiled", "ms"), Column("profiled", "ms"),
                                                  Column("overhead", "pct+")],
                            lambda f: [[p.variant, p.batch_size, p.unprofiled_step_ms, p.profiled_step_ms,
                                        p.overhead_pct] for p in f.profiler_overhead])])
