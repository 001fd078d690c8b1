"""report.html: one self-contained page (inline CSS and SVG, no script, no network).

The first screen is the answer: the bottom line (the same rows as the console and report.md), then
each configuration finding in full. Below it every section of the report model, in order, with its
headline numbers, plots, tables and verdicts; then the rules that passed or could not run, and the
environment. Everything taken from facts, a trace, a config or a verdict is escaped (`esc`); plots are
SVG strings built in gcdoctor.report.svg from the sections' entries.
"""
from __future__ import annotations

from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Callable

from gcdoctor.types import EXPERIMENT, SEVERITIES, Evidence, Verdict
from gcdoctor.facts import Facts
from gcdoctor.report.bottom_line import PRESCRIPTION, bottom_line_for
from gcdoctor.report.html_parts import Raw, details, figure, figures, kv, para, section, table
from gcdoctor.report.json_report import REPORT_SCHEMA
from gcdoctor.report.model import (Section, Table, drop_empty_columns, format_value, format_with_unit, header_of,
                                   numeric)
from gcdoctor.report.sections import present
from gcdoctor.report.svg import esc
from gcdoctor.report.verdicts import configuration_findings, counts, environment_rows, sort_key

SEVERITY_WORD = {s.name: s.badge for s in SEVERITIES}


@dataclass
class RenderContext:
    facts: Facts
    verdicts: list[Verdict]
    run_dir: Path | None = None


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
    """One verdict: headline, its numbers, what to do, and why (folded away in compact cards)."""
    sev = v.severity if v.severity in SEVERITY_WORD else "inconclusive"
    measured = [e for e in v.evidence if e.value is not None]
    missing = [e.label for e in v.evidence if e.value is None]
    shown = measured[:6] if compact else measured
    tiles = "".join(f'<div class="number"><div class="v">{esc(evidence_value(e))}'
                    + (f'<span class="u">{esc(e.unit)}</span>' if e.unit else "")
                    + f'</div><div class="l">{esc(e.label)}</div></div>' for e in shown)
    numbers = f'<div class="numbers">{tiles}</div>' if tiles else ""
    extra = ", ".join(e.text() for e in measured[6:]) if compact else ""
    subject = f'<p class="sub">About: {esc(v.subject)}</p>' if v.subject else ""
    scope = ' <span class="scope">experiment</span>' if v.scope == EXPERIMENT else ""
    why = ""
    if v.explanation or extra or missing or v.traceback:
        text = "".join([f"<p><b>Why.</b> {esc(v.explanation)}</p>" if v.explanation else "",
                        f'<p class="small">Also: {esc(extra)}</p>' if extra else "",
                        f'<p class="small">Not measured: {esc(", ".join(missing))}</p>' if missing else "",
                        f"<pre>{esc(v.traceback)}</pre>" if v.traceback else ""])
        why = f"<details><summary>Why</summary>{text}</details>" if compact else f'<div class="why">{text}</div>'
    act = f'<p class="action"><b>What to do.</b> {esc(v.recommendation)}</p>' if v.recommendation else ""
    aid = f' id="{esc(anchor)}"' if anchor else ""
    return (f'<article class="verdict {sev}{" compact" if compact else ""}"{aid} data-code="{esc(v.code)}" '
            f'data-severity="{esc(sev)}" data-scope="{esc(v.scope)}"><h3><span class="badge {sev}">'
            f'{SEVERITY_WORD[sev]}</span><span class="code">{esc(v.code)}</span>{esc(v.headline)}{scope}</h3>'
            f"{subject}{numbers}{act}{why}</article>")


def bottom_line(ctx: RenderContext) -> str:
    rows = bottom_line_for(ctx.facts, ctx.verdicts)
    lines = "\n".join(esc(r.render()) for r in rows)
    block = f'<pre class="bottom-line" id="bottom-line-text">{lines}</pre>'
    cards = "".join(verdict_card(v, f"verdict-{i}", compact=v.topic == PRESCRIPTION or v.severity == "info")
                    for i, v in enumerate(configuration_findings(ctx.verdicts), start=1))
    if not cards:
        cards = para("No finding about your configuration: the rules that could judge it passed (listed below).")
    return section("bottom-line", "Bottom line", Raw(block), Raw(cards))


def table_html(t: Table, facts: Facts) -> str:
    rows = t.rows(facts)
    if not rows:
        return ""
    cols, rows = drop_empty_columns(t, rows)
    first_num = next((i for i, c in enumerate(cols) if numeric(c) and not c.key), len(cols))
    body = table([header_of(c) for c in cols], [[format_value(v, c.unit) for v, c in zip(r, cols)] for r in rows],
                 numeric_from=first_num, ids=[f"{t.id}:{t.key_of(r)}" for r in rows])
    cap = para(t.caption, "small") if t.caption else ""
    if t.fold:
        return details(t.title or t.id, body, cap)
    return (f"<h3>{esc(t.title)}</h3>" if t.title else "") + body + cap


def section_html(s: Section, ctx: RenderContext) -> str:
    f = ctx.facts
    keys = s.keys(f)
    parts: list[str] = []
    if keys:
        parts.append(table(["", "value"], [[k.label, format_with_unit(k.value, k.unit)] for k in keys], css="key-numbers",
                           ids=[f"{s.id}:{k.id}" for k in keys]))
    plots = [(svg, cap) for svg, cap in s.plots(f, ctx.run_dir) if svg]
    if plots:
        figs = [figure(svg, cap) for svg, cap in plots]
        parts.append(Raw(f'<div class="timeline">{"".join(figs)}</div>') if s.wide_plots else figures(*figs))
    parts += [table_html(t, f) for t in s.tables(f)]
    mine = sorted((v for v in ctx.verdicts if v.topic in s.topics and v.status != "inconclusive"), key=sort_key)
    if mine:
        fired = [v for v in mine if v.status in ("fired", "error")]
        ok = [v for v in mine if v.status == "passed"]
        parts.append("<h3>Verdicts</h3>" + "".join(verdict_card(v, compact=True) for v in fired))
        if ok:
            parts.append(details(f"{len(ok)} passed", table(["rule", "result"], [[v.code, v.headline] for v in ok],
                                                           numeric_from=9)))
    notes = s.notes(f)
    if notes:
        parts.append(Raw('<ul class="notes">' + "".join(f"<li>{esc(n)}</li>" for n in notes) + "</ul>"))
    return section(s.id, s.title, *parts, lead=s.lead(f))


def _sections(ctx: RenderContext) -> list[str]:
    out: list[str] = []
    topics: set[str] = set()
    for s in present(ctx.facts):
        out.append(section_html(s, ctx))
        topics.update(s.topics)
    orphans = sorted((v for v in ctx.verdicts if v.status in ("fired", "error") and v.topic not in topics
                      and v.topic != PRESCRIPTION and (v.scope == EXPERIMENT or v.status == "error")), key=sort_key)
    if orphans:
        out.append(section("other", "Other findings", Raw("".join(verdict_card(v, compact=True) for v in orphans))))
    return out


def rules_section(ctx: RenderContext) -> str:
    rest = sorted((v for v in ctx.verdicts if v.status not in ("fired", "error")), key=sort_key)
    if not rest:
        return ""
    rows = [[v.code, v.slug, v.scope, "passed" if v.status == "passed" else "could not run",
             v.headline + (f" ({v.subject})" if v.subject else "")] for v in rest]
    return section("rules", "Rules that passed or could not run",
                   table(["code", "rule", "scope", "status", "result"], rows, numeric_from=9,
                         ids=[f"{v.code}:{v.subject}" for v in rest]))


def environment_section(ctx: RenderContext) -> str:
    rows = environment_rows(ctx.facts)
    if ctx.run_dir is not None:
        rows.append(("run directory", str(ctx.run_dir)))
    return section("environment", "Environment", kv(rows))


# The page, in order.
SECTIONS: list[Callable[[RenderContext], str | list[str]]] = [bottom_line, _sections, rules_section,
                                                               environment_section]
WORDS = {s.name: s.word for s in SEVERITIES}


def _chips(c: dict[str, int]) -> str:
    return "".join(f'<span class="count {k}">{c[k]} {WORDS[k]}</span>'
                   for k in WORDS if c.get(k))


def _header(ctx: RenderContext) -> str:
    f = ctx.facts
    m, e, st = f.model, f.environment, f.settings
    title = f"gcdoctor report: {m.name if m else 'trace'} on {e.device_name or 'unknown device'}"
    sub = " · ".join(x for x in (
        e.device_kind, f"driver {e.driver}" if e.driver else "", f"torch {e.torch}" if e.torch else "",
        f"sequence {st.seq_len}" if st.seq_len and m is not None else "", st.dtype if m is not None else "",
        st.optimizer if m is not None else "", st.started_at) if x)
    conf, exp = counts(ctx.verdicts, "configuration"), counts(ctx.verdicts, EXPERIMENT)
    chips = (f'<div class="counts"><span class="scope-label">Your configuration:</span>{_chips(conf) or "—"}</div>'
             + (f'<div class="counts"><span class="scope-label">Experiments (the probes\' variants, not your '
                f'setup):</span>{_chips(exp)}</div>' if exp else ""))
    banner = ('<p class="banner">The run was interrupted: what follows is what was measured before it '
              "stopped.</p>" if st.interrupted else "")
    if st.error:
        banner += f'<p class="banner">The run ended with an error: {esc(st.error)}</p>'
    return f"<header><h1>{esc(title)}</h1><p class=\"sub\">{esc(sub)}</p>{chips}{banner}</header>"


def _toc(ctx: RenderContext, body: str) -> str:
    names = [("bottom-line", "Bottom line")] + [(s.id, s.title.split(":")[0]) for s in present(ctx.facts)] + [
        ("other", "Other findings"), ("rules", "Other rules"), ("environment", "Environment")]
    links = "".join(f'<a href="#{esc(sid)}">{esc(label)}</a>' for sid, label in names if f'<section id="{sid}"' in body)
    return f'<nav class="toc">{links}</nav>'


def _css() -> str:
    return resources.files("gcdoctor.report").joinpath("report.css").read_text()


def render_html(facts: Facts, verdicts: list[Verdict], run_dir: str | Path | None = None) -> str:
    """The whole page as one string. With `run_dir`, the telemetry timeline is drawn from its
    telemetry.csv and events.jsonl and the memory limit is read from its config.json."""
    ctx = RenderContext(facts, list(verdicts), Path(run_dir) if run_dir is not None else None)
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
            f"{_header(ctx)}{_toc(ctx, body)}{body}{footer}</main></body></html>\n")


__all__ = ["RenderContext", "SECTIONS", "render_html", "verdict_card"]
