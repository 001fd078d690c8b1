"""report.md: the bottom line first, then what to do about your configuration, then every section of
the report model with its verdicts, then the rules that passed or could not run and the environment.
It renders whatever `gcdoctor.report.sections.SECTIONS` holds; it never judges."""
from __future__ import annotations

from gcdoctor.types import EXPERIMENT, SEVERITIES, Verdict
from gcdoctor.facts import Facts
from gcdoctor.report.bottom_line import PRESCRIPTION, bottom_line_text
from gcdoctor.report.format import md_fence, md_table, term_safe
from gcdoctor.report.model import Section, Table, drop_empty_columns, format_value, format_with_unit, header_of
from gcdoctor.report.sections import present
from gcdoctor.report.verdicts import by_topic, configuration_findings, environment_rows, sort_key

SEVERITY_MARK = {s.name: s.label for s in SEVERITIES}


def md_text(text: str) -> str:
    """Text from facts, traces or configs as inert Markdown: no raw HTML, no link syntax."""
    from gcdoctor.report.format import md_escape
    return md_escape(str(text))


def verdict_block(v: Verdict) -> list[str]:
    lines = [f"### [{SEVERITY_MARK.get(v.severity, '?')}] {v.code} {md_text(v.headline)}"]
    if v.subject:
        lines.append(f"*About:* {md_text(v.subject)}")
    lines.append("")
    lines += [f"- {md_text(e.text())}" for e in v.evidence]
    if v.explanation:
        lines += ["", f"**Why.** {md_text(v.explanation)}"]
    if v.recommendation:
        lines += ["", f"**What to do.** {md_text(v.recommendation)}"]
    if v.status == "error" and v.traceback:
        lines += ["", md_fence(v.traceback.rstrip())]
    return lines + [""]


def verdict_item(v: Verdict) -> str:
    mark = SEVERITY_MARK.get(v.severity, "?")
    where = f" ({v.scope})" if v.scope == EXPERIMENT else ""
    text = f"- **[{mark}] {v.code}**{where} {md_text(v.headline)}"
    if v.status == "fired" and v.recommendation:
        text += f" — *What to do:* {md_text(v.recommendation)}"
    return text


def table_md(t: Table, facts: Facts) -> list[str]:
    rows = t.rows(facts)
    if not rows:
        return []
    cols, rows = drop_empty_columns(t, rows)
    cells = [[md_text(format_value(v, c.unit)) for v, c in zip(r, cols)] for r in rows]
    out = [f"### {md_text(t.title)}", ""] if t.title else []
    out.append(md_table([header_of(c) for c in cols], cells))
    if t.caption:
        out += ["", f"*{md_text(t.caption)}*"]
    return out + [""]


def section_md(s: Section, facts: Facts, verdicts: list[Verdict]) -> str:
    lines = [f"## {md_text(s.title)}", ""]
    lead = s.lead(facts)
    if lead:
        lines += [md_text(lead), ""]
    keys = s.keys(facts)
    if keys:
        lines += [md_table(["", ""], [[md_text(k.label), md_text(format_with_unit(k.value, k.unit))] for k in keys]), ""]
    for t in s.tables(facts):
        lines += table_md(t, facts)
    if s.plots is not None and any(svg for svg, _ in s.plots(facts, None)):
        lines += ["*Plots: see report.html.*", ""]
    mine = [v for v in verdicts if v.topic in s.topics and v.status != "inconclusive"]
    if mine:
        lines += ["Verdicts:", ""] + [verdict_item(v) for v in sorted(mine, key=sort_key)] + [""]
    notes = s.notes(facts)
    if notes:
        lines += [f"- {md_text(n)}" for n in notes] + [""]
    return "\n".join(lines).rstrip() + "\n"


def render_markdown(facts: Facts, verdicts: list[Verdict]) -> str:
    m = facts.model
    title = f"# gcdoctor report: {md_text(m.name) if m else 'trace'} on {md_text(facts.environment.device_name or 'unknown device')}"
    parts = [title]
    if facts.settings.interrupted:
        parts.append("> The run was interrupted: what follows is what was measured before it stopped.")
    parts.append("## Bottom line\n\n" + md_fence(bottom_line_text(facts, verdicts), "text"))
    findings = configuration_findings(verdicts)
    if findings:
        parts.append("## Your configuration: what to do\n\n" + "\n".join(
            line for v in findings for line in verdict_block(v)).rstrip())
    shown_topics: set[str] = set()
    sections = present(facts)
    for s in sections:
        parts.append(section_md(s, facts, verdicts).rstrip())
        shown_topics.update(s.topics)
    orphans = [v for v in verdicts if v.status in ("fired", "error") and v.topic not in shown_topics
               and v.topic != PRESCRIPTION]
    if orphans:
        parts.append("## Other findings\n\n" + "\n".join(verdict_item(v) for v in sorted(orphans, key=sort_key)))
    rest = [v for v in verdicts if v.status not in ("fired", "error")]
    if rest:
        parts.append("## Rules that passed or could not run\n\n" + md_table(
            ["code", "rule", "scope", "status", "result"],
            [[v.code, v.slug, v.scope, v.status, md_text(v.headline + (f" ({v.subject})" if v.subject else ""))]
             for v in sorted(rest, key=sort_key)]))
    parts.append("## Environment\n\n" + md_table(["", ""], [[k, md_text(v)] for k, v in environment_rows(facts)]))
    return term_safe("\n\n".join(parts) + "\n")  # no control character from any source reaches the file


__all__ = ["by_topic", "render_markdown"]
