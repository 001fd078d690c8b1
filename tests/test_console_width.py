"""What a person reads on the console fits 80 columns when the output is not a terminal: the summary of
every recorded run, `rules`, `explain` of every rule, `compare`. (Paths, which are copied, are never
cut: a line that is a path is exempt.)"""
from __future__ import annotations

from pathlib import Path

import pytest

from gcdoctor.cli import main
from gcdoctor.engine import evaluate
from gcdoctor.facts import Facts
from gcdoctor.report.console import summary
from gcdoctor.rules import ALL_RULES

SAMPLES = Path(__file__).resolve().parents[1] / "samples"
RUNS = sorted(p.parent for p in SAMPLES.rglob("facts.json"))


def widest(text: str) -> int:
    return max(len(x) for x in text.splitlines() if not x.startswith("report: "))


@pytest.mark.parametrize("run", RUNS, ids=[r.name for r in RUNS])
def test_the_summary_of_every_recorded_run_fits_80_columns_and_starts_with_the_bottom_line(run):
    facts = Facts.load(run / "facts.json")
    text = summary(facts, evaluate(facts), report_path="/tmp/x/report.html", width=80)
    assert text.startswith("Bottom line: ") and widest(text) <= 80


@pytest.mark.parametrize("argv", [["rules"]] + [["explain", r.code] for r in ALL_RULES], ids=" ".join)
def test_rules_and_explain_fit_80_columns(argv, capsys):
    assert main(argv) == 0
    assert widest(capsys.readouterr().out) <= 80


def test_the_live_log_wraps_at_80_columns_off_a_terminal():
    import io

    from gcdoctor.console import ConsolePrinter
    from gcdoctor.events import VerdictIssued
    out = io.StringIO()
    printer = ConsolePrinter(out)
    printer(VerdictIssued({"severity": "ok", "code": "GC005", "headline": "Without checkpointing, batches up to 4 "
                           "fit (it costs -24% step time): at that batch or smaller checkpointing is unneeded "
                           "(pass --target-batch N for a verdict on yours)"}))
    lines = out.getvalue().splitlines()
    assert len(lines) == 3 and all(len(ln) <= 80 for ln in lines)
    assert lines[0].endswith("[ok] GC005 Without checkpointing, batches up to 4 fit (it costs -24%")
    assert lines[1] == " " * 14 + "step time): at that batch or smaller checkpointing is unneeded"
    assert lines[2] == " " * 14 + "(pass --target-batch N for a verdict on yours)"
