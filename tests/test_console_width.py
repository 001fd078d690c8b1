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
    assert "…" not in text  # wrapped, or fewer columns: never a word dropped


def test_the_batch_sweep_table_keeps_the_peak_at_80_columns_and_says_what_it_left_out():
    facts = Facts.load(SAMPLES / "h200-llama3-8b-diagnose-w3" / "facts.json")
    lines = summary(facts, evaluate(facts), width=80).splitlines()
    start = lines.index("Batch sweep (median of the measured steps):")
    table = lines[start + 1:lines.index("", start)]
    assert table[0].split() == ["variant", "batch", "result", "step", "ms", "tok/s", "peak"]
    assert table[1].split() == ["no_gc", "2", "fits", "876.5", "9,346", "105.96", "GiB"]
    assert table[2].split()[:4] == ["no_gc", "3", "OOM", "(backward,"]
    assert table[-1] == "  (left out at 80 columns: MFU; every column is in report.md)"
    wide = summary(facts, evaluate(facts), width=120).splitlines()
    assert "MFU" in wide[wide.index("Batch sweep (median of the measured steps):") + 1]


def test_analyze_of_a_cpu_trace_says_its_bottom_line_whole(tmp_path, capsys):
    assert main(["analyze", str(SAMPLES / "traces" / "cpu-tiny-llama.json.gz"), "--out", str(tmp_path / "r")]) == 0
    out = capsys.readouterr().out
    assert "…" not in out and widest(out) <= 80
    head = " ".join(out.split("\n\n")[0].split())
    assert head.endswith("nothing about the device or checkpointing could be judged")


@pytest.mark.parametrize("argv", [["rules"]] + [["explain", r.code] for r in ALL_RULES], ids=" ".join)
def test_rules_and_explain_fit_80_columns(argv, capsys):
    assert main(argv) == 0
    assert widest(capsys.readouterr().out) <= 80


def test_the_live_log_wraps_at_80_columns_off_a_terminal():
    import io

    from gcdoctor.run.console import ConsolePrinter
    from gcdoctor.run.events import VerdictIssued
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
