"""`gcdoctor compare RUN_A RUN_B [--html OUT]` on real recorded runs: the metrics with both values
and B/A, the verdicts that appeared, disappeared or changed severity, and one-line errors."""
from __future__ import annotations

import copy
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


def row(rows, group: str, label: str):
    return next(r for r in rows if r.group == group and r.label == label)


def test_rows_measured_in_both_runs_hold_both_values_and_how_they_differ(runs):
    a, b = runs
    rows = compare_rows(a, b)
    common = set(a.facts.sweep.common_batches()) & set(b.facts.sweep.common_batches())
    assert common
    for batch in common:
        for v in ("no_gc", "gc"):
            ma, mb = a.facts.sweep.get(v, batch), b.facts.sweep.get(v, batch)
            step = row(rows, "Batch sweep", f"{v} {batch} step")
            assert (step.a, step.b) == (ma.step_ms_median, mb.step_ms_median)
            assert step.change == f"{mb.step_ms_median / ma.step_ms_median:.2f}x"
            peak = row(rows, "Batch sweep", f"{v} {batch} peak allocated")
            assert (peak.a, peak.b) == (ma.peak_allocated_bytes, mb.peak_allocated_bytes)
    # a batch only A measured is said to be so, not compared against nothing
    only = row(rows, "Batch sweep", "sweep: rows measured in A only")
    assert only.b is None and "no_gc 1" in only.a.split(", ")


def test_percentages_differ_in_points_not_as_a_ratio(runs):
    a, b = runs
    over = row(compare_rows(a, b), "Batch sweep", "checkpointing's step-time overhead")
    assert over.unit == "pct+" and over.change == f"{over.b - over.a:+.1f} pp"


def test_settings_that_differ_are_marked(runs):
    a, b = runs
    rows = compare_rows(a, b)
    assert row(rows, "environment", "dtype / optimizer").change == "differs"  # adamw vs sgd
    assert row(rows, "environment", "torch").change == "same"
    gain = row(rows, "Batch sweep", "batch gain from checkpointing")
    assert gain.b is None and gain.change == "not measured in B"  # B's batches were fixed: no boundary


def test_text_output_fits_80_columns_and_shows_both_values(runs, capsys):
    a, b = runs
    assert main(["compare", str(ADAMW), str(SGD)]) == 0
    out = capsys.readouterr().out
    assert out == render_text(a, b) + "\n"
    assert max(len(x) for x in out.splitlines()) <= 80
    batch = max(set(a.facts.sweep.common_batches()) & set(b.facts.sweep.common_batches()))
    ma, mb = a.facts.sweep.get("gc", batch), b.facts.sweep.get("gc", batch)
    assert (f"  gc {batch} step: {ma.step_ms_median:,.1f} ms | {mb.step_ms_median:,.1f} ms | "
            f"{mb.step_ms_median / ma.step_ms_median:.2f}x") in out.splitlines()


def test_each_run_is_judged_with_its_own_thresholds(tmp_path):
    import json
    import shutil
    b = tmp_path / "b"
    shutil.copytree(ADAMW, b, ignore=shutil.ignore_patterns("traces", "*.html", "events.jsonl", "telemetry.csv"))
    cfg = json.loads((b / "config.json").read_text())
    cfg["thresholds"] = {"GC001": {"max_overhead_pct": 80.0}}  # B's own run allowed more overhead
    (b / "config.json").write_text(json.dumps(cfg))
    ra, rb = load_run(ADAMW), load_run(b)
    va = next(v for v in ra.verdicts if v.code == "GC001")
    vb = next(v for v in rb.verdicts if v.code == "GC001")
    assert (va.status, vb.status) == ("fired", "passed")


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


def test_a_verdict_b_could_not_judge_is_not_measured_in_b_and_new_numbers_are_not_unchanged(runs):
    a, _ = runs
    before = a.verdicts
    fired = next(v for v in before if v.status == "fired")
    after = copy.deepcopy(before)
    unjudged = next(v for v in after if v.key == fired.key)
    unjudged.status, unjudged.severity = "inconclusive", "inconclusive"
    assert {(c.code, c.subject): c.kind for c in verdict_changes(before, after)}[fired.key] == "not-measured"
    moved = copy.deepcopy(before)
    m = next(v for v in moved if v.key == fired.key)
    m.headline = m.headline.replace("53%", "19%")  # the same severity, other numbers: never "unchanged"
    assert {(c.code, c.subject): c.kind for c in verdict_changes(before, moved)}[fired.key] == "changed"
