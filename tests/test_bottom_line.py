"""The bottom line on real recorded runs: at most 12 lines of
80 columns, configuration first, the prescription, at most three device findings, and a pointer."""
from __future__ import annotations

import copy
from pathlib import Path

import pytest

from gcdoctor.engine import evaluate
from gcdoctor.types import EXPERIMENT, Verdict
from gcdoctor.facts import Facts
from gcdoctor.report.bottom_line import bottom_line, bottom_line_for, bottom_line_text

SAMPLES = Path(__file__).resolve().parents[1] / "samples"
RUNS = sorted(p.parent for p in SAMPLES.rglob("facts.json"))


def load(name: str) -> tuple[Facts, list[Verdict]]:
    facts = Facts.load(SAMPLES / name / "facts.json")
    return facts, evaluate(facts)


def test_the_h200_diagnose_reads_as_a_healthy_configuration_with_a_prescription():
    facts, verdicts = load("h200-llama3-8b-diagnose")
    assert bottom_line_text(facts, verdicts).splitlines() == [
        "Bottom line: llama3-8b on NVIDIA H200, seq 4096, bf16, AdamW",
        "  use  layer checkpointing at batch 11: 8,233 tok/s; no checkpointing at batch",
        "       2: 9,225 tok/s (+12 %), faster if accumulation reaches your global batch",
        "  ok   checkpointing costs +22 % step time at batch 2 (normal 5-35%)",
        "  ok   checkpointing saves 67 % of activations at batch 2 (29 % of the peak)",
        "  ok   largest batch 2 -> 11 with layer checkpointing (5.5x)",
        "  ok   checkpointing is numerically benign: losses and gradients agree to noise",
        "  dev  CPU offload costs +188 % step time or more here (gc+save_on_cpu-pinned):",
        "       avoid it unless memory forces it; deepspeed-ckpt-cpu costs +2 %",
        "  dev  each checkpoint region costs ~855 us of host time here: avoid small ones",
        "  dev  fine checkpointing (each nn.Linear of each layer) saves nothing here",
        "  ...  10 more experiment findings (granularity 5, offload 4, jitter 1) below",
    ]


def test_the_2_layer_run_leads_with_the_prescription_then_its_configuration_warning():
    facts, verdicts = load("h200-llama3-8b-2layers-sweep")
    lines = bottom_line_text(facts, verdicts).splitlines()
    assert lines[1:6] == [
        "  use  no checkpointing at batch 2: 71,672 tok/s; layer checkpointing 64,333",
        "       (-10 %)",
        "  warn checkpointing saves only 24 % of activations at batch 2: the loss is the",
        "       peak",
        "  ok   checkpointing costs +11 % step time at batch 2 (normal 5-35%)"]


@pytest.mark.parametrize("run", RUNS, ids=[r.name for r in RUNS])
@pytest.mark.parametrize("width", [80, 60])
def test_every_recorded_run_fits_12_lines_of_the_width_and_no_experiment_is_a_problem_row(run, width):
    facts = Facts.load(run / "facts.json")
    verdicts = evaluate(facts)
    rows = bottom_line_for(facts, verdicts, width=width)
    assert 1 <= len(rows) <= 12 and all(len(r.render(width)) <= width for r in rows)
    experiment_keys = {v.key for v in verdicts if v.scope == EXPERIMENT}
    for r in rows:
        if r.key in experiment_keys:
            assert r.mark in ("dev", "err"), r.text


def test_an_interrupted_run_and_a_crashed_probe_come_first_after_the_prescription():
    facts, verdicts = load("h200-llama3-8b-4layers-sweep")
    facts = copy.deepcopy(facts)
    facts.settings.interrupted = True
    facts.probe_failed("offload", "RuntimeError: boom")
    lines = bottom_line_text(facts, verdicts).splitlines()
    assert lines[1] == "  use  no checkpointing at batch 4: 53,176 tok/s; layer checkpointing 46,104"
    assert lines[3].startswith("  stop the run was interrupted")
    assert any(x.startswith("  stop probe offload crashed (RuntimeError: boom)") for x in lines[4:6])


def test_a_rule_that_raised_is_shown_as_an_error():
    class Boom:
        code, slug, title, requires, defaults, scope, topic = "GC999", "boom", "Boom", (), {}, "experiment", "x"

        def check(self, facts, t):
            raise ZeroDivisionError("division by zero")

    [v] = evaluate(Facts(), rules=[Boom()])
    assert (v.status, v.severity) == ("error", "error") and "ZeroDivisionError" in v.traceback
    rows = bottom_line([v], "t")
    assert rows[1].mark == "err" and "the rule failed (ZeroDivisionError: division by zero)" in rows[1].text


def test_with_nothing_judged_it_says_so_instead_of_calling_the_run_healthy():
    rows = bottom_line([], "your trace on NVIDIA H200")
    assert [r.render() for r in rows] == [
        "Bottom line: your trace on NVIDIA H200",
        "  ?    nothing about your configuration could be judged from what was measured"]


def test_at_most_three_device_findings_and_the_rest_counted():
    v = [Verdict(f"GC0{i}", "s", "fired", "warning", f"h{i}", subject=f"x{i}", scope=EXPERIMENT,
                 line=f"finding {i}", topic="granularity") for i in range(10, 16)]
    rows = bottom_line(v, "t")
    assert [r.text for r in rows if r.mark == "dev"] == ["finding 10", "finding 11", "finding 12"]
    assert rows[-1].text == "3 more experiment findings (granularity 3) below"


@pytest.mark.parametrize("run, fail_on, extra, code", [
    ("h200-llama3-8b-diagnose", "warning", [], 0),  # healthy: the experiments' criticals are not the user's
    ("h200-llama3-8b-diagnose", "critical", [], 0),
    ("h200-llama3-8b-diagnose", "critical", ["--fail-on-experiments"], 1),
    ("h200-llama3-8b-2layers-sweep", "warning", [], 1),  # GC002: the loss, not the layers, is the peak
    ("h200-llama3-8b-2layers-sweep", "critical", [], 0),
    ("h200-llama3-8b-diagnose-w3", "warning", [], 0),  # every default probe, allocator and optimizer too
    ("h200-llama3-8b-diagnose-w3", "warning", ["--fail-on-experiments"], 1),
])
def test_fail_on_judges_the_configuration(tmp_path, run, fail_on, extra, code):
    from gcdoctor.cli import main
    assert main(["analyze", str(SAMPLES / run), "--out", str(tmp_path / "out"), "--fail-on", fail_on] + extra) == code


def test_a_device_finding_left_out_for_room_is_counted_below():
    v = [Verdict(f"GC0{i}", "s", "fired", "warning", f"h{i}", subject=f"x{i}", scope=EXPERIMENT,
                 line=f"finding {i}", topic="granularity") for i in range(10, 16)]
    rows = bottom_line(v, "t", max_lines=5)  # the title, "nothing judged", two findings, the pointer
    assert [r.text for r in rows if r.mark == "dev"] == ["finding 10", "finding 11"]
    assert rows[-1].text == "4 more experiment findings (granularity 4) below"


def test_a_percentage_is_never_split_from_its_number():
    from gcdoctor.report.bottom_line import _wrap
    rows = _wrap("use", "no checkpointing at batch 4: 4,652 tok/s; layer checkpointing 3,656 (-21 %)", None, 80)
    assert [r.text for r in rows] == ["no checkpointing at batch 4: 4,652 tok/s; layer checkpointing 3,656",
                                      "(-21 %)"]
