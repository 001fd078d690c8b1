"""The summary printed at the end of a run (and by `analyze`): the bottom line first, then what to do
about each configuration verdict, then the experiments' findings grouped by probe, all within the
terminal's width (80 columns when the output is not a terminal)."""
from __future__ import annotations

import shutil
import sys
import textwrap

from gcdoctor.types import EXPERIMENT, Verdict, verdict_order
from gcdoctor.facts import Facts
from gcdoctor.experiments import EXPERIMENTS
from gcdoctor.report.bottom_line import MARK, PRESCRIPTION, WIDTH, bottom_line_for, unjudged_reasons
from gcdoctor.report.format import fit_table, term_safe
from gcdoctor.report.model import format_value
from gcdoctor.report.sections.sweep import sweep_rows

TOPIC_TITLE = {**{e.name: e.title for e in EXPERIMENTS}, "launch": "launch cost", "trace": "trace", "memory": "memory"}


def output_width(stream=None) -> int:
    """The terminal's width when writing to one, else 80 (logs, pipes, CI)."""
    stream = stream or sys.stdout
    if hasattr(stream, "isatty") and stream.isatty():
        return max(40, shutil.get_terminal_size((WIDTH, 24)).columns)
    return WIDTH


def wrap(text: str, width: int, indent: str = "", first: str | None = None) -> list[str]:
    """`text` wrapped to `width` columns, every word kept: `first` prefixes the first line, `indent`
    the others. Nothing is ever cut with an ellipsis: in a CI log the cut words would be gone."""
    first = indent if first is None else first
    return textwrap.wrap(" ".join(str(text).split()), width, initial_indent=first, subsequent_indent=indent,
                         break_long_words=True, break_on_hyphens=False) or [first.rstrip()]


def _mark(v: Verdict) -> str:
    return MARK.get(v.severity, "?")


def _configuration_lines(verdicts: list[Verdict], width: int) -> list[str]:
    """What to do about each configuration verdict that fired."""
    config = [v for v in verdicts if v.scope != EXPERIMENT and v.topic != PRESCRIPTION
              and v.status in ("fired", "error")]
    if not config:
        return []
    lines = ["", "What to do about your configuration:"]
    for v in config:
        lines += wrap(f"{v.code} {v.headline}", width, " " * 7, first=f"  {_mark(v):<4} ")
        if v.recommendation:
            lines += wrap(v.recommendation, width, " " * 10, first="       -> ")
    return lines


def _sweep_lines(facts: Facts, width: int) -> list[str]:
    """The batch sweep's table, the columns that do not fit the width left out (and said so)."""
    if facts.sweep is None or not facts.sweep.measurements:
        return []
    # variant, batch, result, step, tokens/s, MFU, peak allocated of the sweep section's table
    units = ["text", "int", "text", "ms", "tok/s", "share", "bytes"]
    rows = [[format_value(v, u) for v, u in zip([r[0], r[1], r[2], r[3], r[5], r[6], r[7]], units)]
            for r in sweep_rows(facts)]
    lines = ["", "Batch sweep (median of the measured steps):"]
    table, dropped = fit_table(["variant", "batch", "result", "step ms", "tok/s", "MFU", "peak"], rows, width,
                               drop=("MFU", "tok/s"))
    lines += table
    if dropped:
        lines.append(f"  (left out at {width} columns: {', '.join(dropped)}; every column is in report.md)")
    return lines


def _experiment_lines(verdicts: list[Verdict], width: int) -> list[str]:
    """The experiments' findings, grouped by probe."""
    experiments = [v for v in verdicts if v.scope == EXPERIMENT and v.status in ("fired", "error")]
    if not experiments:
        return []
    lines = ["", "Experiments: what the probes' variants showed about this device"]
    by_topic: dict[str, list[Verdict]] = {}
    for v in sorted(experiments, key=verdict_order):
        by_topic.setdefault(v.topic or "other", []).append(v)
    for topic, vs in by_topic.items():
        lines.append(f"  {TOPIC_TITLE.get(topic, topic)}:")
        for v in vs:
            lines += wrap(f"{v.code} {v.headline}", width, " " * 15, first=f"    {_mark(v):<4} ")
    return lines


def _not_judged_lines(facts: Facts, verdicts: list[Verdict], width: int) -> list[str]:
    """The rules that could not judge what was measured (and why), then those that lacked data."""
    lines: list[str] = []
    unjudged = unjudged_reasons(facts, verdicts)
    if unjudged:
        lines += ["", "Not judged although measured:"]
        for code, reason in unjudged:
            lines += wrap(f"{code} {reason}", width, " " * 7, first="  ?    ")
    skipped = sorted({v.code for v in verdicts if v.status == "inconclusive" and v.topic != PRESCRIPTION}
                     - {code for code, _ in unjudged})
    if skipped:
        lines += [""] + wrap(f"Not judged for lack of data: {', '.join(skipped)} (reasons in the report).", width)
    return lines


def summary(facts: Facts, verdicts: list[Verdict], report_path: str | None = None, width: int | None = None) -> str:
    width = width or output_width()
    lines = [r.render(width) for r in bottom_line_for(facts, verdicts, width)]
    lines += _configuration_lines(verdicts, width)
    lines += _sweep_lines(facts, width)
    lines += _experiment_lines(verdicts, width)
    lines += _not_judged_lines(facts, verdicts, width)
    if report_path:
        lines += ["", f"report: {report_path}"]  # never cut: it is copied and pasted
    return term_safe("\n".join(lines))
