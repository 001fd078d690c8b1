"""Facts from a bare torch.profiler trace, for `gcdoctor analyze TRACE`.

A user's own trace gives the trace metrics and what the trace says about the device; everything
gcdoctor learns from its own experiments (GC on/off sweep, telemetry, memory model, ...) is
recorded as unavailable, with the reason, so the report says which rules could not run.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any

from gcdoctor import __version__
from gcdoctor.model import hardware
from gcdoctor.experiments import EXPERIMENTS
from gcdoctor.facts import Environment, Facts
from gcdoctor.trace.load import load_trace
from gcdoctor.trace.metrics import compute_metrics, primary_device
from gcdoctor.trace.tables import TraceTables

_BARE = "a bare trace has no {what}; `gcdoctor diagnose` measures it"
NOT_IN_A_TRACE = {
    "model": _BARE.format(what="model description"),
    "sweep": _BARE.format(what="batch sweep with and without checkpointing"),
    "memory_model": _BARE.format(what="analytic memory model (it does not say which model ran)"),
    "profiler_overhead": _BARE.format(what="unprofiled step time to compare with"),
    "telemetry": _BARE.format(what="device, PCIe or CPU telemetry"),
    **{e.facts: _BARE.format(what=e.bare_trace) for e in EXPERIMENTS if e.bare_trace and e.facts != "sweep"},
    "watch": _BARE.format(what="live watch of a training job"),
}


def _version(v: Any) -> str | None:
    """CUDA-style integer versions (12080 -> "12.8"); other values as text."""
    if isinstance(v, int) and not isinstance(v, bool) and v >= 1000:
        return f"{v // 1000}.{(v % 1000) // 10}"
    return str(v) if v not in (None, "") else None


def environment_from_trace(t: TraceTables) -> Environment:
    """What the trace's metadata says about the device (deviceProperties, runtime versions)."""
    env = Environment(device_kind=t.device_kind or "cpu", gcdoctor=__version__)
    props = t.device_properties
    if props:
        dev = primary_device(t)
        p = next((p for p in props if p.get("id") == dev), props[0])
        env.device_name = str(p.get("name", ""))
        mem = p.get("totalGlobalMem")
        env.total_memory_bytes = mem if isinstance(mem, int) and not isinstance(mem, bool) else None
        env.device_count = len(props)
    for key, value in t.metadata.items():
        if key.endswith("_runtime_version") and env.runtime is None:
            v = _version(value)
            env.runtime = f"{key.split('_')[0].upper()} {v}" if v else None
    host = t.metadata.get("host_name")
    env.host = host if isinstance(host, str) else None
    spec = hardware.lookup(env.device_name) if env.device_name and env.device_kind != "cpu" else None
    if spec:
        env.peak_bf16_tflops, env.peak_fp32_tflops = spec.bf16_tflops, spec.fp32_tflops
        env.memory_bandwidth_gbs = spec.memory_bandwidth_gbs
        env.pcie_peak_gbs = hardware.pcie_peak_gbs(spec.pcie_gen, spec.pcie_lanes)
    return env


def facts_from_trace(path: str | Path) -> Facts:
    """Load, measure and describe one trace file. Raises UserError for unreadable input."""
    path = Path(path)
    tables = load_trace(path)
    metrics = compute_metrics(tables, source=path.name)
    facts = Facts(environment=environment_from_trace(tables))
    facts.settings.command = "analyze"
    facts.trace = metrics  # keyed by window: "all", "step:<n>", "forward", "recompute", ...
    facts.unavailable.update(NOT_IN_A_TRACE)
    for name, m in metrics.items():
        if m.device_unavailable:
            facts.unavailable[f"trace.{name}"] = f"no device metrics: {m.device_unavailable}"
    all_m = metrics.get("all")
    if all_m is not None and all_m.recompute_share is None and not all_m.device_unavailable:
        facts.unavailable["trace.all.recompute_share"] = (
            "no recompute in the trace: no gcdoctor/recompute labels, and no forward ops replayed inside the "
            "backward (checkpointing off, or compiled into the graph)")
    return facts
