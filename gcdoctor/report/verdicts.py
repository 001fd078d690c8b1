"""What every writer selects from the verdicts and the environment, in one place (selection by scope,
status and topic only: the rules decided everything else)."""
from __future__ import annotations

from typing import Any

from gcdoctor.types import EXPERIMENT, Verdict, verdict_order
from gcdoctor.facts import Environment, Facts, RunSettings
from gcdoctor.report.bottom_line import PRESCRIPTION
from gcdoctor.report.model import format_value


sort_key = verdict_order


def configuration_findings(verdicts: list[Verdict]) -> list[Verdict]:
    """Configuration verdicts that fired (or rules that raised), and the prescription: the cards shown in
    full under the bottom line."""
    out = [v for v in verdicts if (v.scope != EXPERIMENT and v.status in ("fired", "error"))
           or (v.status == "error")]
    return sorted(out, key=lambda v: (v.topic != PRESCRIPTION,) + sort_key(v))


def by_topic(verdicts: list[Verdict]) -> dict[str, list[Verdict]]:
    out: dict[str, list[Verdict]] = {}
    for v in sorted(verdicts, key=sort_key):
        out.setdefault(v.topic or "other", []).append(v)
    return out


def counts(verdicts: list[Verdict], scope: str) -> dict[str, int]:
    """{severity or status word: count} of one scope: what the HTML header's badges count."""
    out: dict[str, int] = {}
    for v in verdicts:
        if (v.scope == EXPERIMENT) != (scope == EXPERIMENT) or v.topic == PRESCRIPTION:
            continue
        key = v.severity if v.status in ("fired", "error") else ("ok" if v.status == "passed" else "inconclusive")
        out[key] = out.get(key, 0) + 1
    return out


def settings_text(facts: Facts) -> str | None:
    """The run's settings as the facts hold them; None for a bare trace (it records none of them)."""
    st = facts.settings
    if st.command == "analyze" and facts.model is None:
        return None
    parts = [f"sequence {st.seq_len}" if st.seq_len else "", st.dtype, st.optimizer]
    if st.command == "diagnose":
        parts.append(f"{st.warmup_steps} warm-up + {st.measure_steps} measured steps per point")
        if st.probes:
            parts.append("probes " + ", ".join(st.probes))
    return ", ".join(p for p in parts if p) or None


def _device_text(e: Environment) -> str:
    return (f"{e.device_name or '—'} ({e.device_kind or '—'})"
            + (f" × {e.device_count}" if e.device_count and e.device_count > 1 else ""))


def _host_text(e: Environment, bare: bool) -> str | None:
    """The host row: a bare trace records only the host's name; a run its CPUs and memory too."""
    if bare:
        return e.host or None
    if not (e.host or e.cpu_count or e.host_memory_bytes):
        return None
    return ", ".join(x for x in (e.host, f"{e.cpu_count} CPUs" if e.cpu_count else "",
                                 format_value(e.host_memory_bytes, "bytes") if e.host_memory_bytes else "") if x)


def _rates_text(e: Environment) -> str:
    return ", ".join(x for x in (
        f"bf16 {e.peak_bf16_tflops:g} TFLOP/s" if e.peak_bf16_tflops else "",
        f"fp32 {e.peak_fp32_tflops:g} TFLOP/s" if e.peak_fp32_tflops else "",
        f"memory {e.memory_bandwidth_gbs:g} GB/s" if e.memory_bandwidth_gbs else "",
        f"PCIe {e.pcie_peak_gbs:g} GB/s" if e.pcie_peak_gbs else "") if x)


def _run_text(st: RunSettings, bare: bool) -> str:
    wall = f", wall {st.wall_s} s" if st.wall_s is not None else ""
    return (("analyze of a profiler trace" if bare else st.command)
            + (f", started {st.started_at}" if st.started_at else "") + wall
            + (", INTERRUPTED: partial results" if st.interrupted else "")
            + (f", error: {st.error}" if st.error else ""))


def environment_rows(facts: Facts) -> list[tuple[str, str]]:
    e, st, m = facts.environment, facts.settings, facts.model
    rows: list[tuple[str, Any]] = []
    if m is not None:
        rows.append(("model", f"{m.name} ({m.source}), {m.n_layers}/{m.n_layers_full} layers, "
                              f"{m.n_params / 1e9:.3f} B parameters, {m.dtype}, attention {m.attn_implementation}"))
    rows += [("device", _device_text(e)),
             ("device memory", format_value(e.total_memory_bytes, "bytes")), ("driver", e.driver),
             ("runtime", e.runtime), ("torch", e.torch), ("transformers", e.transformers), ("deepspeed", e.deepspeed),
             ("torch_musa", e.torch_musa), ("python", e.python), ("gcdoctor", e.gcdoctor)]
    bare = st.command == "analyze" and m is None  # a bare trace: only what the trace holds
    host = _host_text(e, bare)
    if host is not None:
        rows.append(("host", host))
    rates = _rates_text(e)
    if rates or e.device_kind not in ("", "cpu"):
        rows.append(("peak rates", rates or "unknown for this device"))
    settings = settings_text(facts)
    if settings:
        rows.append(("settings", settings))
    rows.append(("run", _run_text(st, bare)))
    rows += [(f"not measured: {k}", v) for k, v in sorted(facts.unavailable.items())]
    return [(k, "—" if v is None else str(v)) for k, v in rows if v not in (None, "")]
