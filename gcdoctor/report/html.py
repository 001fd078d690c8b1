"""report.html: one self-contained page (inline CSS and SVG, no script, no network).

Order: the bottom line (fired verdicts, most severe first: headline, key numbers, what to do),
one section per probe with its tables and plots, the telemetry timeline, the rules that passed
or could not run, then the environment. Everything taken from facts, a trace, a config or a
verdict is escaped (see `esc`); plots are SVG strings built in gcdoctor.report.svg.
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any, Callable

from gcdoctor.engine import SEVERITY_ORDER, Evidence, Verdict
from gcdoctor.facts import Facts
from gcdoctor.report.json_report import REPORT_SCHEMA
from gcdoctor.report.html_parts import Raw, fbytes, kv, section, table
from gcdoctor.report.html_jitter import jitter_section
from gcdoctor.report.html_offload import offload_section
from gcdoctor.report.html_probes import (granularity_section, memory_model_section, profiler_overhead_section,
                                         trace_section)
from gcdoctor.report.html_sweep import sweep_section
from gcdoctor.report.html_telemetry import telemetry_section
from gcdoctor.report.html_watch import monitor_section, watch_section
from gcdoctor.report.svg import esc

SEVERITY_WORD = {"critical": "CRITICAL", "warning": "WARNING", "info": "NOTE", "ok": "OK", "inconclusive": "?"}


@dataclass
class RenderContext:
    facts: Facts
    verdicts: list[Verdict]
    run_dir: Path | None = None
    config: dict[str, Any] | None = None  # config.json of the run, when rendered from a run directory


def evidence_value(e: Evidence) -> str:
    """The value part of Evidence.text(), formatted the same way."""
    v = e.value
    if v is None:
        return "unavailable"
    if isinstance(v, bool):
        return "yes" if v else "no"
    if isinstance(v, float):
        return f"{v:,.3g}" if abs(v) < 100 else f"{v:,.0f}"
    if isinstance(v, int):
        return f"{v:,}"
    return str(v)


def verdict_card(v: Verdict, anchor: str = "", compact: bool = False) -> str:
    """One fired verdict: headline, its numbers, why, and what to do.

    Compact cards (notes) keep the headline, at most six numbers and the action; the explanation
    folds away so warnings stay on the first screen."""
    sev = v.severity if v.severity in SEVERITY_WORD else "inconclusive"
    measured = [e for e in v.evidence if e.value is not None]
    missing = [e.label for e in v.evidence if e.value is None]
    tiles = []
    for e in measured[:6] if compact else measured:
        unit = f'<span class="u">{esc(e.unit)}</span>' if e.unit else ""
        tiles.append(f'<div class="number"><div class="v">{esc(evidence_value(e))}{unit}</div>'
                     f'<div class="l">{esc(e.label)}</div></div>')
    numbers = f'<div class="numbers">{"".join(tiles)}</div>' if tiles else ""
    rest = measured[6:] if compact else []
    extra = ", ".join(e.text() for e in rest)
    subject = f'<p class="sub">About: {esc(v.subject)}</p>' if v.subject else ""
    why = ""
    if v.explanation or extra or missing:
        text = "".join([f"<p><b>Why.</b> {esc(v.explanation)}</p>" if v.explanation else "",
                        f'<p class="small">Also: {esc(extra)}</p>' if extra else "",
                        f'<p class="small">Not measured: {esc(", ".join(missing))}</p>' if missing else ""])
        why = f"<details><summary>Why</summary>{text}</details>" if compact else f'<div class="why">{text}</div>'
    act = f'<p class="action"><b>What to do.</b> {esc(v.recommendation)}</p>' if v.recommendation else ""
    aid = f' id="{esc(anchor)}"' if anchor else ""
    return (f'<article class="verdict {sev}{" compact" if compact else ""}"{aid} data-code="{esc(v.code)}" '
            f'data-severity="{esc(sev)}"><h3><span class="badge {sev}">{SEVERITY_WORD[sev]}</span>'
            f'<span class="code">{esc(v.code)}</span>{esc(v.headline)}</h3>{subject}{numbers}{act}{why}</article>')


def ranked(verdicts: list[Verdict]) -> list[Verdict]:
    return sorted(verdicts, key=lambda v: (SEVERITY_ORDER.get(v.severity, 9), v.code, v.subject))


def bottom_line(ctx: RenderContext) -> str:
    fired = ranked([v for v in ctx.verdicts if v.status == "fired"])
    if not fired:
        passed = sum(v.status == "passed" for v in ctx.verdicts)
        body = (f'<article class="verdict ok all-clear"><h3><span class="badge ok">OK</span>No rule fired.</h3>'
                f"<p>Checkpointing behaves as expected for what was measured: {passed} rule(s) passed; "
                f"see below for the ones that could not run.</p></article>")
        return section("bottom-line", "Bottom line", Raw(body))
    index = ""
    if len(fired) > 3:  # many findings: one line each first, so the worst is on the first screen
        items = "".join(f'<li><a href="#verdict-{i}"><span class="badge {v.severity}">'
                        f'{SEVERITY_WORD.get(v.severity, "?")}</span><span class="code">{esc(v.code)}</span>'
                        f"{esc(v.headline)}</a></li>" for i, v in enumerate(fired, start=1))
        index = f'<ol class="verdict-index">{items}</ol>'
    cards = "".join(verdict_card(v, f"verdict-{i}", compact=v.severity not in ("critical", "warning"))
                    for i, v in enumerate(fired, start=1))
    return section("bottom-line", "Bottom line", Raw(index + cards))


def rules_section(ctx: RenderContext) -> str:
    rest = ranked([v for v in ctx.verdicts if v.status != "fired"])
    if not rest:
        return ""
    rows = [[v.code, v.slug, "passed" if v.status == "passed" else "could not run", v.headline
             + (f" ({v.subject})" if v.subject else "")] for v in rest]
    return section("rules", "Rules that passed or could not run",
                   table(["code", "rule", "status", "result"], rows, numeric_from=9,
                         ids=[f"{v.code}:{v.subject}" for v in rest]))


def environment_section(ctx: RenderContext) -> str:
    f = ctx.facts
    e, st, m = f.environment, f.settings, f.model
    rows: list[tuple[str, Any]] = []
    if m is not None:
        rows.append(("model", f"{m.name} ({m.source}), {m.n_layers}/{m.n_layers_full} layers, "
                              f"{m.n_params / 1e9:.3f} B parameters, {m.dtype}, attention {m.attn_implementation}"))
    rows += [("device", f"{e.device_name or '—'} ({e.device_kind or '—'})"
              + (f" × {e.device_count}" if e.device_count and e.device_count > 1 else "")),
             ("device memory", fbytes(e.total_memory_bytes)), ("driver", e.driver), ("runtime", e.runtime),
             ("torch", e.torch), ("transformers", e.transformers), ("deepspeed", e.deepspeed),
             ("torch_musa", e.torch_musa), ("python", e.python), ("gcdoctor", e.gcdoctor),
             ("host", e.host or "—" if st.command == "analyze" and m is None else
              f"{e.host or '—'}, {e.cpu_count or '—'} CPUs, {fbytes(e.host_memory_bytes)}"),
             ("peak rates", ", ".join(x for x in (
                 f"bf16 {e.peak_bf16_tflops:g} TFLOP/s" if e.peak_bf16_tflops else "",
                 f"fp32 {e.peak_fp32_tflops:g} TFLOP/s" if e.peak_fp32_tflops else "",
                 f"memory {e.memory_bandwidth_gbs:g} GB/s" if e.memory_bandwidth_gbs else "",
                 f"PCIe {e.pcie_peak_gbs:g} GB/s" if e.pcie_peak_gbs else "") if x) or "unknown for this device")]
    if not (st.command == "analyze" and m is None):  # a bare trace has no gcdoctor settings
        rows.append(("settings", f"sequence {st.seq_len}, {st.dtype}, {st.optimizer}, {st.warmup_steps} warm-up + "
                                 f"{st.measure_steps} measured steps, probes {', '.join(st.probes) or '—'}"))
    limit = (ctx.config or {}).get("memory_limit_bytes")
    if limit:
        rows.append(("memory limit", f"{fbytes(limit)} (--memory-limit)"))
    wall = "—" if st.wall_s is None else st.wall_s
    rows.append(("run", f"{st.command}, started {st.started_at or '—'}, wall {wall} s"
                        + (", INTERRUPTED: partial results" if st.interrupted else "")
                        + (f", error: {st.error}" if st.error else "")))
    if ctx.run_dir is not None:
        rows.append(("run directory", str(ctx.run_dir)))
    body = [kv(rows)]
    if f.unavailable:
        body.append("<h3>Not measured</h3>" + table(["what", "why"], sorted(f.unavailable.items()), numeric_from=9))
    return section("environment", "Environment", *body)


def _probe_sections(ctx: RenderContext) -> list[str]:
    f = ctx.facts
    return [sweep_section(f, ctx.config), granularity_section(f), offload_section(f), jitter_section(f),
            memory_model_section(f), watch_section(f), monitor_section(f), telemetry_section(f, ctx.run_dir),
            trace_section(f), profiler_overhead_section(f)]


# The page, in order. Other writers may append (ctx) -> html sections before rules/environment.
SECTIONS: list[Callable[[RenderContext], str | list[str]]] = [
    bottom_line, _probe_sections, rules_section, environment_section,
]


def _header(ctx: RenderContext) -> str:
    f = ctx.facts
    m, e, st = f.model, f.environment, f.settings
    title = f"gcdoctor report: {m.name if m else 'trace'} on {e.device_name or 'unknown device'}"
    sub = " · ".join(x for x in (
        e.device_kind, f"driver {e.driver}" if e.driver else "", f"torch {e.torch}" if e.torch else "",
        f"sequence {st.seq_len}" if st.seq_len else "", st.dtype, st.optimizer, st.started_at) if x)
    counts: dict[str, int] = {}
    for v in ctx.verdicts:
        key = v.severity if v.status == "fired" else ("ok" if v.status == "passed" else "inconclusive")
        counts[key] = counts.get(key, 0) + 1
    words = {"critical": "critical", "warning": "warning", "info": "note", "ok": "passed",
             "inconclusive": "could not run"}
    chips = "".join(f'<span class="count {k}">{counts[k]} {words[k]}</span>'
                    for k in ("critical", "warning", "info", "ok", "inconclusive") if counts.get(k))
    banner = ('<p class="banner">The run was interrupted: what follows is what was measured before it '
              "stopped.</p>" if st.interrupted else "")
    if st.error:
        banner += f'<p class="banner">The run ended with an error: {esc(st.error)}</p>'
    return (f"<header><h1>{esc(title)}</h1><p class=\"sub\">{esc(sub)}</p>"
            f'<div class="counts">{chips}</div>{banner}</header>')


def _toc(body: str) -> str:
    names = [("bottom-line", "Bottom line"), ("sweep", "Batch sweep"), ("granularity", "Granularity"),
             ("offload", "Offload"), ("jitter", "Loss jitter"), ("memory-model", "Memory model"),
             ("watch", "Watched run"), ("monitor", "Monitored job"),
             ("telemetry", "Telemetry"), ("trace", "Traces"), ("profiler-overhead", "Profiler overhead"),
             ("rules", "Other rules"), ("environment", "Environment")]
    links = "".join(f'<a href="#{sid}">{label}</a>' for sid, label in names if f'<section id="{sid}"' in body)
    return f'<nav class="toc">{links}</nav>'


def _css() -> str:
    return resources.files("gcdoctor.report").joinpath("report.css").read_text()


def _read_config(run_dir: Path | None) -> dict[str, Any] | None:
    if run_dir is None:
        return None
    try:
        data = json.loads((run_dir / "config.json").read_text())
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def render_html(facts: Facts, verdicts: list[Verdict], run_dir: str | Path | None = None) -> str:
    """The whole page as one string. With `run_dir`, the telemetry timeline is drawn from its
    telemetry.csv and events.jsonl and the memory limit is read from its config.json."""
    rd = Path(run_dir) if run_dir is not None else None
    ctx = RenderContext(facts, list(verdicts), rd, _read_config(rd))
    parts: list[str] = []
    for fn in SECTIONS:
        out = fn(ctx)
        parts += [p for p in (out if isinstance(out, list) else [out]) if p]
    body = "".join(parts)
    e = facts.environment
    footer = (f"<footer>gcdoctor {esc(e.gcdoctor or '')} · report schema {REPORT_SCHEMA} · every figure above "
              f"was measured on {esc(e.device_name or 'unknown device')} ({esc(e.device_kind)}), torch "
              f"{esc(e.torch or '—')}, with the settings listed under Environment.</footer>")
    title = f"gcdoctor: {facts.model.name if facts.model else 'trace'} on {e.device_name or 'unknown device'}"
    return ("<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
            "<meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">"
            f"<title>{esc(title)}</title><style>{_css()}</style></head><body><main>"
            f"{_header(ctx)}{_toc(body)}{body}{footer}</main></body></html>\n")


__all__ = ["RenderContext", "SECTIONS", "render_html"]
