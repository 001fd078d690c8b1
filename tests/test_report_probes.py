"""The sections' tables hold what the facts of every recorded run say (the parameter lists grow as runs
are recorded); test_report_model checks that every writer shows these rows as they are."""
from __future__ import annotations

from pathlib import Path

import pytest

from gcdoctor.facts import Facts
from gcdoctor.report.sections import granularity, jitter, offload, sweep, watch

SAMPLES = Path(__file__).resolve().parents[1] / "samples"
RUNS = sorted(p.parent for p in SAMPLES.rglob("facts.json"))


def runs_with(section: str, attr: str) -> list[Path]:
    return [r for r in RUNS if getattr(getattr(Facts.load(r / "facts.json"), section), attr, None)]


def table(section, facts: Facts, tid: str) -> dict[str, list]:
    t = next(t for t in section.tables(facts) if t.id == tid)
    return {t.key_of(r): r for r in t.rows(facts)}


@pytest.mark.parametrize("run", runs_with("sweep", "measurements"), ids=lambda r: r.name)
def test_sweep_rows_are_the_measurements(run):
    facts = Facts.load(run / "facts.json")
    rows = table(sweep.SECTION, facts, "sweep")
    assert len(rows) == len({(m.variant, m.batch_size) for m in facts.sweep.measurements})
    for m in facts.sweep.measurements:
        r = rows[f"{m.variant} {m.batch_size}"]
        if m.fits:
            assert r[2:4] == ["fits", m.step_ms_median] and r[5:8] == [m.tokens_per_s, m.mfu, m.peak_allocated_bytes]
            assert r[9] == m.activation_peak_bytes
        else:
            kind = f", {m.oom.kind}" if m.oom is not None and m.oom.kind != "unknown" else ""
            assert r[2] == f"OOM ({m.oom_phase}{kind})" and r[3] is None


def test_sweep_headline_numbers_of_the_h200_run():
    facts = Facts.load(SAMPLES / "h200-llama3-8b-diagnose" / "facts.json")
    keys = {k.id: k for k in sweep.SECTION.keys(facts)}
    assert keys["max-batch-no_gc"].value == "2; out of memory at 3 (backward)"
    assert keys["max-batch-gc"].value == "11; out of memory at 12 (forward)"
    assert keys["max-batch-gain"].value == 5.5 and keys["equal-batch"].value == 2
    assert round(keys["overhead"].value, 1) == 21.7
    assert round(keys["activation-saving"].value) == 67


@pytest.mark.parametrize("run", runs_with("granularity", "groups"), ids=lambda r: r.name)
def test_granularity_rows_are_every_variant_of_every_group(run):
    facts = Facts.load(run / "facts.json")
    rows = table(granularity.SECTION, facts, "granularity")
    for g in facts.granularity.groups:
        for v in g.variants:
            r = rows[f"{g.name} {v.variant}"]
            assert r[4:6] == [v.step_ms, v.time_added_pct] and r[7:9] == [v.memory_saved_bytes, v.memory_saved_pct]
            assert r[3] == ("fits" if v.fits else r[3]) and r[10] == v.regions_per_step


@pytest.mark.parametrize("run", runs_with("offload", "variants"), ids=lambda r: r.name)
def test_offload_rows_show_step_and_copy_time(run):
    facts = Facts.load(run / "facts.json")
    rows = table(offload.SECTION, facts, "offload")
    copies = table(offload.SECTION, facts, "offload-copies")
    for v in facts.offload.variants:
        assert rows[v.variant][3:5] == [v.step_ms, v.slowdown_pct]
        if v.ran and v.copy_ms is not None:
            assert copies[v.variant][3:5] == [v.copy_ms, v.exposed_copy_ms]
        else:
            assert v.variant not in copies


@pytest.mark.parametrize("run", runs_with("jitter", "runs"), ids=lambda r: r.name)
def test_jitter_rows_show_loss_differences_and_every_run_is_plotted(run):
    facts = Facts.load(run / "facts.json")
    rows = table(jitter.SECTION, facts, "jitter-comparisons")
    for c in facts.jitter.comparisons:
        r = rows[c.name]
        assert r[6] == (max(c.loss_abs_diff) if c.loss_abs_diff else None) and r[4] == c.losses_equal
    (loss, _), _ = jitter.SECTION.plots(facts, None)
    for r in facts.jitter.runs:
        if r.losses:
            assert f"<title>{r.name}</title>" in loss  # one curve per run in the loss plot


@pytest.mark.parametrize("run", runs_with("watch", "steps"), ids=lambda r: r.name)
def test_watched_run_rows_show_every_step(run):
    facts = Facts.load(run / "facts.json")
    rows = table(watch.WATCH, facts, "watch-steps")
    assert [r[:3] for r in rows.values()] == [[s.index, s.step_ms, s.loss] for s in facts.watch.steps]
