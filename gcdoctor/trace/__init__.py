"""Profiler trace -> tables -> metrics. No torch here: traces are analysed anywhere.

    load_trace(path) -> TraceTables
    compute_metrics(tables, windows=None) -> {window name: TraceMetrics}
    facts_from_trace(path) -> Facts   (for `gcdoctor analyze` on a bare trace)

Metric definitions: docs/trace-metrics.md.
"""
from gcdoctor.trace.load import load_trace
from gcdoctor.trace.metrics import available_windows, compute_metrics
from gcdoctor.trace.tables import TraceTables
from gcdoctor.trace.to_facts import facts_from_trace

__all__ = ["TraceTables", "available_windows", "compute_metrics", "facts_from_trace", "load_trace"]
