"""Which scope and report topic a verdict about a trace key or a probe subject has.

Trace keys and subjects start with the probe that made them ("sweep/gc", "granularity/model/layer",
"offload/gc+save_on_cpu-pinned", "watch/step-3"); a bare trace's windows have no probe ("all",
"step:3"). The sweep, a watched run and a user's trace are the configuration the user trains;
the granularity and offload probes' variants (and the launch-cost microbenchmark) are experiments.
"""
from __future__ import annotations

from gcdoctor.types import CONFIGURATION, EXPERIMENT
from gcdoctor.facts.trace import TraceKey

EXPERIMENT_PROBES = ("granularity", "offload", "launch", "sharding")


def probe_of(key: str) -> str:
    """'offload/gc|forward' -> 'offload'; a bare trace's 'all' or 'step:3' -> 'trace'."""
    return TraceKey.parse(key).probe


def scope_of(key: str) -> str:
    return EXPERIMENT if probe_of(key) in EXPERIMENT_PROBES else CONFIGURATION
