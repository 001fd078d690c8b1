"""`gcdoctor compare RUN_A RUN_B [--html OUT]` on real recorded runs: the metrics with both values
and B/A, the verdicts that appeared, disappeared or changed severity, and one-line errors."""
from __future__ import annotations

import copy
import re
from pathlib import Path

import pytest

from gcdoctor.cli import main
from gcdoctor.report.compare import compare_rows, load_run, render_text, verdict_changes

SAMPLES = Path(__file__).resolve().parents[1] / "samples"
ADAMW = SAMPLES / "cpu-tiny-llama-sweep"  # batch search, AdamW, --memory-limit 400MB
SGD = SAMPLES / "cpu-tiny-llama-sgd"  # fixed batches 8,16, SGD, --memory-limit 400MB


@pytest.fixture(scope="module")
def runs():
    for r in (ADAMW, SGD):
        if not (r / "facts.json").is_file():
            pytest.skip(f"{r.name} is not recorded")
    return load_run(ADAMW), load_run(SGD)


def row(rows, group_start: str, label: str):
    return next(r for r in rows if r.group.startswith(group_start) and r.label == label)


def test_equal_batch_is_the_largest_batch_both_runs_measured_both_ways(runs):
    a, b = runs
    common = set(a.facts.sweep.common_batches()) & set(b.facts.sweep.common_batches())
    rows = compare_rows(a, b)
    r = row(rows, "equal batch", "batch compared")
    assert r.a == r.b == max(common)


def test_step_time_and_peak_rows_hold_both_runs_values_and_the_ratio(runs):
    a, b = runs
    rows = compare_rows(a, b)
    batch = row(rows, "equal batch", "batch compared").a
    for v in ("no_gc", "gc"):
        ma, mb = a.facts.sweep.get(v, batch), b.facts.sweep.get(v, batch)
        step = row(rows, "equal batch", f"step time, {v}")
        assert (step.a, step.b) == (ma.step_ms_median, mb.step_ms_median)
        assert step.change == f"{mb.step_ms_median / ma.step_ms_median:.2f}x"
        peak = row(rows, "equal batch", f"peak allocated, {v}")
        assert (peak.a, peak.b) == (ma.peak_allocated_bytes, mb.peak_allocated_bytes)
    over = row(rows, "equal batch", "recompute overhead (gc vs no_gc)")
    off, on = a.facts.sweep.get("no_gc", batch), a.facts.sweep.get("gc", batch)
    assert over.a == pytest.approx(100 * (on.step_ms_median / off.step_ms_median - 1))
    assert over.change == f"{over.b - over.a:+.1f} pp"  # percentages: difference in points, not a ratio


def test_settings_that_differ_are_marked(runs):
    a, b = runs
    rows = compare_rows(a, b)
    assert row(rows, "environment", "dtype / optimizer").change == "differs"  # adamw vs sgd
    assert row(rows, "environment", "torch").change == "same"
    mb = row(rows, "batch sweep", "largest batch, no_gc")
    assert (mb.a, mb.b) == (a.facts.sweep.max_batch["no_gc"], b.facts.sweep.max_batch["no_gc"])
    assert mb.change == "B: fixed batch list, not searched"  # no ratio of a boundary with a list's end


def test_text_output_shows_both_values_and_the_ratio(runs, capsys):
    a, b = runs
    assert main(["compare", str(ADAMW), str(SGD)]) == 0
    out = capsys.readouterr().out
    assert out == render_text(a, b) + "\n"
    batch = row(compare_rows(a, b), "equal batch", "batch compared").a
    ma, mb = a.facts.sweep.get("gc", batch), b.facts.sweep.get("gc", batch)
    line = next(ln for ln in out.splitlines() if ln.strip().startswith("step time, gc"))
    assert re.split(r"\s{2,}", line.strip()) == ["step time, gc", f"{ma.step_ms_median:,.1f} ms",
                                                 f"{mb.step_ms_median:,.1f} ms",
                                                 f"{mb.step_ms_median / ma.step_ms_median:.2f}x"]


def test_html_output_is_written(runs, tmp_path, capsys):
    out = tmp_path / "sub" / "cmp.html"
    assert main(["compare", str(ADAMW), str(SGD), "--html", str(out)]) == 0
    html = out.read_text()
    assert 'id="verdicts"' in html and 'id="metrics"' in html and html.count("<svg") == 2
    assert f"HTML: {out}" in capsys.readouterr().out


def test_verdicts_that_appear_disappear_or_change_severity(runs):
    a, _ = runs
    before = a.verdicts
    fired = [v for v in before if v.status == "fired"]
    passed = [v for v in before if v.status == "passed"]
    assert fired and len(passed) >= 2, "the sample run should have a fired and two passed verdicts"
    after = copy.deepcopy(before)
    worse = next(v for v in after if v.key == fired[0].key)
    worse.severity = "critical" if worse.severity != "critical" else "warning"
    broke = next(v for v in after if v.key == passed[0].key)
    broke.status, broke.severity = "fired", "warning"  # a regression
    new = copy.deepcopy(worse)
    new.code, new.subject = "GC099", "new-subject"
    after.append(new)
    kinds = {(c.code, c.subject): c.kind for c in verdict_changes(before, after)}
    assert kinds[fired[0].key] == "severity"
    assert kinds[passed[0].key] == "appeared"
    assert kinds[("GC099", "new-subject")] == "appeared"
    assert all(k == "same" for key, k in kinds.items() if key not in (fired[0].key, passed[0].key,
                                                                       ("GC099", "new-subject")))
    fixed = copy.deepcopy(before)
    gone = next(v for v in fixed if v.key == fired[0].key)
    gone.status, gone.severity = "passed", "ok"  # the fix worked
    assert {(c.code, c.subject): c.kind for c in verdict_changes(before, fixed)}[fired[0].key] == "disappeared"
    assert all(c.kind == "same" for c in verdict_changes(before, copy.deepcopy(before)))


@pytest.mark.parametrize("make, message", [
    (lambda p: p / "missing", "no such run directory"),
    (lambda p: (p / "f.json").write_text("{}") and p / "f.json", "not a gcdoctor run directory (a file"),
    (lambda p: p, "not a gcdoctor run directory (no facts.json)"),
    (lambda p: (p / "facts.json").write_text('{"sweep": 3}') and p, "not a valid gcdoctor facts file"),
])
def test_a_path_that_is_not_a_run_directory_is_one_line_and_exit_2(tmp_path, capsys, make, message):
    bad = make(tmp_path)
    good = ADAMW if (ADAMW / "facts.json").is_file() else bad
    assert main(["compare", str(good), str(bad)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and message in err and err.startswith("gcdoctor: error: ")
