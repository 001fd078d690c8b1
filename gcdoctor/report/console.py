"""The concise summary printed at the end of a run (and by `analyze`)."""
from __future__ import annotations

from gcdoctor.engine import Verdict
from gcdoctor.facts import Facts
from gcdoctor.report.format import text_table
from gcdoctor.report.sweep import sweep_rows

MARK = {"critical": "!!", "warning": "! ", "info": "i ", "ok": "ok", "inconclusive": "? "}


def summary(facts: Facts, verdicts: list[Verdict], report_path: str | None = None) -> str:
    lines = []
    if facts.sweep is not None and facts.sweep.measurements:
        rows = [r[:3] + r[4:7] for r in sweep_rows(facts)]
        lines += [text_table(["variant", "batch", "step ms", "tok/s", "MFU", "peak GiB"], rows), ""]
    for v in verdicts:
        if v.status == "inconclusive":
            continue
        lines.append(f"[{MARK.get(v.severity, '  ')}] {v.code} {v.headline}")
        if v.status == "fired" and v.recommendation:
            lines.append(f"       -> {v.recommendation}")
    skipped = sorted({v.code for v in verdicts if v.status == "inconclusive"})
    if skipped:
        lines.append(f"[? ] not judged for lack of data: {', '.join(skipped)} (reasons in the report)")
    if facts.settings.interrupted:
        lines.append("(interrupted: partial results)")
    if report_path:
        lines.append(f"report: {report_path}")
    return "\n".join(lines)
