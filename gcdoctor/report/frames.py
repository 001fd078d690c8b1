"""gcdoctor for notebooks: a run directory or a profiler trace as pandas DataFrames.

    import gcdoctor
    run = gcdoctor.load("gcdoctor-runs/20250101-120000-diagnose-llama3-8b")   # or a .json(.gz) trace
    run.measurements          # one row per measured point: probe, variant, batch, step ms, peaks, tokens/s, MFU
    run.verdicts              # code, severity, status, scope, headline, subject
    run.idle                  # per profiled window: busy / idle µs and the idle breakdown (host wait, short gaps, other)
    run.telemetry             # telemetry.csv: one row per sample, t_monotonic_s and wall_time_s as columns
    run.trace_tables()        # {trace: {"ops", "runtime", "cpu_ops", "ranges": DataFrame}} (kernels, copies, ...)
    run.facts                 # the typed Facts behind it all

Needs pandas (`pip install 'gcdoctor[pandas]'`); nothing here imports torch.
"""
from __future__ import annotations

from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

from gcdoctor.errors import UserError
from gcdoctor.experiments import NOTEBOOK_SECTIONS


def _pd() -> Any:
    try:
        import pandas as pd
    except ModuleNotFoundError:
        raise UserError("gcdoctor.load needs pandas: pip install 'gcdoctor[pandas]'") from None
    return pd


@dataclass(repr=False)
class Run:
    """A loaded run directory (or a bare trace): its facts, judged, as DataFrames."""

    def __repr__(self) -> str:
        """A short summary for a notebook (the facts themselves run to hundreds of KB)."""
        f = self.facts
        what = f.model.name if getattr(f, "model", None) is not None and f.model.name else "trace"
        device = getattr(f.environment, "device_name", None) or getattr(f.environment, "device_kind", None) or "?"
        fired = sum(1 for v in self.verdict_list if v.status in ("fired", "error"))
        return (f"<gcdoctor.Run {str(self.path)!r}: {what} on {device}, {len(self.verdict_list)} verdicts "
                f"({fired} fired); .measurements .verdicts .idle .telemetry .trace_tables()>")

    path: Path
    facts: Any
    verdict_list: list[Any] = field(default_factory=list)
    _traces: list[Path] = field(default_factory=list)

    @property
    def measurements(self) -> Any:
        """Every measured point of every probe: sweep, granularity, offload, jitter, watch."""
        pd = _pd()
        from gcdoctor.facts import Measurement
        rows = []
        for m in _measurements(self.facts):
            row = {f.name: getattr(m, f.name) for f in fields(Measurement) if f.name not in ("telemetry",)}
            row["step_ms"] = list(m.step_ms) if m.step_ms else []
            rows.append(row)
        return pd.DataFrame(rows)

    @property
    def verdicts(self) -> Any:
        pd = _pd()
        cols = ("code", "slug", "severity", "status", "scope", "headline", "subject", "recommendation")
        return pd.DataFrame([{c: getattr(v, c, None) for c in cols} for v in self.verdict_list], columns=list(cols))

    @property
    def idle(self) -> Any:
        """The idle breakdown of each profiled window (trace metrics), one row per window."""
        pd = _pd()
        keep = ("device_window_us", "busy_us", "busy_share", "idle_us", "idle_host_wait_us", "idle_short_gap_us",
                "idle_other_us", "kernel_count", "recompute_share", "source")
        rows = []
        for key, tm in self.facts.trace.items():
            trace, _, window = key.partition("|")
            row: dict[str, Any] = {"trace": trace, "window": window or "all"}
            row.update({k: getattr(tm, k, None) for k in keep})
            rows.append(row)
        return pd.DataFrame(rows)

    @property
    def telemetry(self) -> Any:
        """telemetry.csv (one row a sample); an empty frame where the run recorded none."""
        pd = _pd()
        p = self.path / "telemetry.csv" if self.path.is_dir() else None
        if p is None or not p.is_file():
            return pd.DataFrame()
        return pd.read_csv(p)

    @property
    def traces(self) -> list[Path]:
        return list(self._traces)

    def trace_tables(self, which: str | Path | None = None) -> dict[str, dict[str, Any]]:
        """The trace loader's tables as DataFrames: {trace path: {"ops", "runtime", "cpu_ops",
        "ranges"}}; `which` picks one trace (a path, or a part of its name)."""
        from gcdoctor.trace import load_trace
        chosen = self._traces
        if which is not None:
            w = str(which)
            chosen = [p for p in self._traces if w in str(p)] or [Path(w)]
        out = {}
        for p in chosen:
            t = load_trace(p)
            out[str(p)] = {"ops": t.ops.to_frame(t.names), "runtime": t.runtime.to_frame(t.names),
                           "cpu_ops": t.cpu_ops.to_frame(t.names), "ranges": t.ranges.to_frame(t.names)}
        return out


def _measurements(facts: Any) -> list[Any]:
    out = []
    if facts.sweep is not None:
        out += list(facts.sweep.measurements)
    for section in (*NOTEBOOK_SECTIONS, "watch"):
        sec = getattr(facts, section, None)
        ms = getattr(sec, "measurements", None) if sec is not None else None
        if ms:
            out += [m for m in ms if hasattr(m, "step_ms_median")]
    return out


def load(path: str | Path) -> Run:
    """A run directory (facts.json, telemetry.csv, traces/) or a torch.profiler trace, judged by the
    rules of this gcdoctor."""
    from gcdoctor.engine import evaluate
    from gcdoctor.facts import Facts
    from gcdoctor.trace.perfetto import trace_files
    from gcdoctor.recorded import FACTS_NAME, RUN, TRACE, kind_of
    p = Path(path)
    kind = kind_of(p)
    if kind == RUN:
        facts = Facts.load(p / FACTS_NAME)
        traces = trace_files(p)
    elif p.is_dir():
        raise UserError(f"{p}: not a gcdoctor run directory (no facts.json)")
    elif kind == TRACE:
        from gcdoctor.trace import facts_from_trace
        facts = facts_from_trace(p)
        traces = [p]
    else:
        raise UserError(f"{p}: no such file or directory")
    return Run(p, facts, evaluate(facts), traces)


__all__ = ["Run", "load"]
