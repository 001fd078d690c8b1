"""Shared reading for the offload rules (GC020, GC021): per-step trace numbers of a window, the
link peak, CPU saturation from telemetry, and the measurement behind a profiled trace key."""
from __future__ import annotations

from dataclasses import dataclass

from gcdoctor.facts import Facts, Measurement
from gcdoctor.facts.offload import summary_value
from gcdoctor.facts.telemetry import SeriesSummary
from gcdoctor.facts.trace import TraceKey, TraceMetrics, step_count, trace_runs, trace_window
from gcdoctor.rules._telemetry_windows import pcie_peak_gbs

PHASES = ("forward", "loss", "ckpt-forward", "backward", "recompute", "optimizer")


def steps_in(facts: Facts, key: str) -> int | None:
    """Profiler steps of the trace of a run key ('offload/gc', or a bare trace's 'all')."""
    return step_count(facts.trace, TraceKey.parse(key))


def window(facts: Facts, key: str, name: str) -> TraceMetrics | None:
    """A labelled window of the run under `key` ('offload/gc' -> 'offload/gc|optimizer'), or of a bare trace."""
    return trace_window(facts.trace, TraceKey.parse(key), name)


def link_peak(facts: Facts, device_key: str = "gpu0") -> float | None:
    return pcie_peak_gbs(facts, device_key)


@dataclass
class CpuLoad:
    """Host CPU over the measured steps (telemetry means)."""

    cpu_pct: float | None  # whole host
    max_core_pct: float | None  # busiest core
    proc_pct: float | None  # the training process, 100 = one core

    @property
    def known(self) -> bool:
        return any(v is not None for v in (self.cpu_pct, self.max_core_pct, self.proc_pct))

    def saturated(self, t: dict[str, float]) -> bool:
        """A core pegged (one Python thread holding the GIL), the process using a full core, or every
        core busy."""
        return ((self.max_core_pct is not None and self.max_core_pct >= t["core_busy_pct"])
                or (self.proc_pct is not None and self.proc_pct >= t["proc_busy_pct"])
                or (self.cpu_pct is not None and self.cpu_pct >= t["host_busy_pct"]))


def cpu_load(telemetry: dict[str, SeriesSummary]) -> CpuLoad:
    return CpuLoad(summary_value(telemetry, "cpu_pct", "mean"), summary_value(telemetry, "cpu_max_core_pct", "mean"),
                   summary_value(telemetry, "proc_cpu_pct", "mean"))


def all_measurements(facts: Facts) -> list[Measurement]:
    """Every Measurement the probes recorded (sweep, granularity, offload)."""
    out: list[Measurement] = []
    if facts.sweep is not None:
        out += facts.sweep.measurements
    if facts.offload is not None:
        out += [v.measurement for v in facts.offload.variants if v.measurement is not None]
    if facts.granularity is not None:
        for g in facts.granularity.groups:
            out += [v.measurement for v in g.variants if v.measurement is not None]
    return out


def measurement_for(facts: Facts, key: str) -> Measurement | None:
    """The unprofiled measurement of the profiled trace `key` ('<probe>/<variant>'): same probe and
    variant, at the batch the profiler overhead records for that key (else the largest batch)."""
    if "/" not in key:
        return None
    probe, variant = key.split("/", 1)
    batch = next((p.batch_size for p in facts.profiler_overhead if p.variant == key), None)
    found = [m for m in all_measurements(facts) if m.fits and m.probe == probe and m.variant == variant
             and (batch is None or m.batch_size == batch)]
    if not found and "/" in variant:  # probes whose variant names nest a group ("model/layer")
        group, sub = variant.split("/", 1)
        found = [m for m in all_measurements(facts) if m.fits and m.probe == probe and m.variant in (sub, variant)
                 and (batch is None or m.batch_size == batch)]
    return max(found, key=lambda m: m.batch_size) if found else None


# Probes whose profiled steps are the model's own training step as configured, and a watched job. The
# granularity probe's variants are deliberately fine-grained experiments (GC010 judges them); the
# jitter probe repeats the sweep's steps.
STEP_PROBES = ("sweep", "offload", "watch", "rank")


def run_keys(facts: Facts) -> list[str]:
    """Top-level trace keys of training steps: one per profiled variant of a run ('<probe>/<variant>')
    of STEP_PROBES, or 'all' for a bare trace."""
    runs = trace_runs(facts.trace)
    if any(r.run is None for r in runs):
        return ["all"]
    return [str(r) for r in runs if r.probe in STEP_PROBES]


def pct(x: float | None) -> float | None:
    return None if x is None else 100.0 * x


def ms(us: float | None, steps: int | None) -> float | None:
    return None if us is None else us / (steps or 1) / 1e3
