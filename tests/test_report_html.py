"""report.html rendered from real recorded runs under samples/: structure, and the numbers shown
against the facts they came from."""
from __future__ import annotations

import html as html_lib
import json
import re
from html.parser import HTMLParser
from pathlib import Path

import pytest

from gcdoctor.engine import SEVERITY_ORDER, evaluate
from gcdoctor.facts import Facts
from gcdoctor.report import write_reports
from gcdoctor.report.format import gib, num
from gcdoctor.report.html import render_html
from gcdoctor.report.sweep import sweep_rows

SAMPLES = Path(__file__).resolve().parents[1] / "samples"
SWEEP_RUN = SAMPLES / "cpu-tiny-llama-sweep"  # diagnose --probes sweep --memory-limit 400MB on the CPU
RUNS = sorted(p.parent for p in SAMPLES.rglob("facts.json"))


class Page(HTMLParser):
    """Section ids in order, rows by data-row (cell texts), verdict cards, every tag seen."""

    def __init__(self, text: str) -> None:
        super().__init__(convert_charrefs=True)
        self.sections: list[str] = []
        self.rows: dict[str, list[str]] = {}
        self.cards: list[tuple[str, str]] = []
        self.tags: list[str] = []
        self.svg_rects: list[dict[str, str]] = []
        self._row: str | None = None
        self._cell: list[str] | None = None
        self.feed(text)

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        self.tags.append(tag)
        if tag == "section":
            self.sections.append(a.get("id", ""))
        elif tag == "tr" and "data-row" in a:
            self._row = a["data-row"]
            self.rows[self._row] = []
        elif tag == "td" and self._row is not None:
            self._cell = []
        elif tag == "article" and "data-code" in a:
            self.cards.append((a["data-code"], a.get("data-severity", "")))
        elif tag == "rect" and "band" in a.get("class", ""):
            self.svg_rects.append(a)

    def handle_endtag(self, tag):
        if tag == "td" and self._cell is not None and self._row is not None:
            self.rows[self._row].append("".join(self._cell).strip())
            self._cell = None
        elif tag == "tr":
            self._row = None

    def handle_data(self, data):
        if self._cell is not None:
            self._cell.append(data)


def load(run: Path) -> tuple[Facts, list]:
    facts = Facts.load(run / "facts.json")
    return facts, evaluate(facts)


@pytest.fixture(scope="module")
def sweep_page() -> tuple[Facts, list, str]:
    if not (SWEEP_RUN / "facts.json").is_file():
        pytest.skip("samples/cpu-tiny-llama-sweep is not recorded")
    facts, verdicts = load(SWEEP_RUN)
    return facts, verdicts, render_html(facts, verdicts, run_dir=SWEEP_RUN)


def test_sections_come_in_the_documented_order(sweep_page):
    facts, verdicts, html = sweep_page
    ids = Page(html).sections
    expected = ["bottom-line", "sweep", "telemetry", "rules", "environment"]
    assert [i for i in ids if i in expected] == expected
    assert ids[0] == "bottom-line" and ids[-1] == "environment"


def test_max_batch_cells_show_the_facts(sweep_page):
    facts, _, html = sweep_page
    rows = Page(html).rows
    for variant in ("no_gc", "gc"):
        b = facts.sweep.max_batch[variant]
        assert rows[f"max-batch-{variant}"][1].split(";")[0] == str(b)
    off, on = facts.sweep.max_batch["no_gc"], facts.sweep.max_batch["gc"]
    assert rows["max-batch-gain"][1] == f"{on / off:.2f}x"


def test_step_time_and_peak_cells_show_the_facts(sweep_page):
    facts, _, html = sweep_page
    rows = Page(html).rows
    measured = [m for m in facts.sweep.measurements if m.fits]
    assert measured
    for m in measured:
        cells = rows[f"{m.variant}:{m.batch_size}"]
        assert cells[2] == num(m.step_ms_median)
        assert cells[6] == gib(m.peak_allocated_bytes)
    # the whole table is the shared sweep table, cell for cell
    ordered = sorted(facts.sweep.measurements, key=lambda m: (m.variant != "no_gc", m.batch_size))
    for m, expected in zip(ordered, sweep_rows(facts)):
        assert rows[f"{m.variant}:{m.batch_size}"] == [str(x) for x in expected]


def test_equal_batch_step_times_match_the_facts(sweep_page):
    facts, _, html = sweep_page
    b = facts.sweep.common_batches()[-1]
    off, on = facts.sweep.get("no_gc", b), facts.sweep.get("gc", b)
    rows = Page(html).rows
    assert rows["equal-batch"][1] == str(b)
    pct = 100 * (on.step_ms_median / off.step_ms_median - 1)
    assert rows["step-ms"][1] == f"{off.step_ms_median:,.1f} ms → {on.step_ms_median:,.1f} ms ({pct:+.1f}%)"


def test_bottom_line_ranks_fired_verdicts_by_severity(sweep_page):
    _, verdicts, html = sweep_page
    fired = [v for v in verdicts if v.status == "fired"]
    cards = Page(html).cards
    assert [c for c, _ in cards] == [v.code for v in sorted(fired, key=lambda v: (SEVERITY_ORDER[v.severity], v.code,
                                                                                  v.subject))]
    assert [SEVERITY_ORDER[s] for _, s in cards] == sorted(SEVERITY_ORDER[s] for _, s in cards)
    bottom = html[html.index('id="bottom-line"'):html.index('id="sweep"')]
    for v in fired:
        assert html_lib.escape(v.recommendation) in bottom


def test_rules_that_did_not_fire_are_listed(sweep_page):
    _, verdicts, html = sweep_page
    rows = Page(html).rows
    for v in verdicts:
        if v.status != "fired":
            cells = rows[f"{v.code}:{v.subject}"]
            assert cells[2] == ("passed" if v.status == "passed" else "could not run")


def test_timeline_has_one_band_per_recorded_step(sweep_page):
    facts, _, html = sweep_page
    steps = sum('"StepMeasured"' in line for line in (SWEEP_RUN / "events.jsonl").read_text().splitlines())
    page = Page(html)
    panels = len(re.findall(r'aria-label="[^"]* over the run"', html))
    assert steps > 0 and panels > 0
    assert len(page.svg_rects) == steps * panels


def test_without_run_dir_the_telemetry_falls_back_to_facts(sweep_page):
    facts, verdicts, _ = sweep_page
    html = render_html(facts, verdicts)  # the old signature still works
    assert " over the run" not in html
    if facts.telemetry is not None:
        assert "Timeline not drawn: rendered from facts alone" in html


def test_page_is_self_contained(sweep_page):
    _, _, html = sweep_page
    tags = set(Page(html).tags)
    assert not tags & {"script", "link", "img", "iframe", "object", "embed"}
    urls = set(re.findall(r"https?://[^\s\"'<>)]+", html))
    assert urls <= {"http://www.w3.org/2000/svg"}
    assert "@import" not in html and "url(" not in html


@pytest.mark.parametrize("run", RUNS, ids=[r.name for r in RUNS])
def test_every_recorded_run_renders_a_section_per_measured_probe(run):
    facts, verdicts = load(run)
    ids = Page(render_html(facts, verdicts, run_dir=run)).sections
    expect = {"sweep": facts.sweep is not None and bool(facts.sweep.measurements or facts.sweep.trials),
              "granularity": facts.granularity is not None and bool(getattr(facts.granularity, "groups", None)),
              "jitter": facts.jitter is not None and bool(getattr(facts.jitter, "runs", None)),
              "offload": facts.offload is not None and bool(getattr(facts.offload, "variants", None)),
              "watch": facts.watch is not None and bool(getattr(facts.watch, "steps", None)),
              "trace": bool(facts.trace)}
    for sid, present in expect.items():
        if present:
            assert sid in ids, sid
    assert ids[0] == "bottom-line" and ids[-1] == "environment"


@pytest.mark.parametrize("run", [r for r in RUNS if load(r)[0].sweep is not None],
                         ids=[r.name for r in RUNS if load(r)[0].sweep is not None])
def test_sweep_table_of_every_recorded_run_matches_its_facts(run):
    facts, verdicts = load(run)
    rows = Page(render_html(facts, verdicts)).rows
    ordered = sorted(facts.sweep.measurements, key=lambda m: (m.variant != "no_gc", m.batch_size))
    for m, expected in zip(ordered, sweep_rows(facts)):
        assert rows[f"{m.variant}:{m.batch_size}"] == [str(x) for x in expected]


def test_sections_without_facts_are_skipped():
    facts = Facts()
    html = render_html(facts, evaluate(facts))
    assert Page(html).sections == ["bottom-line", "rules", "environment"]


def test_write_reports_writes_the_html_beside_the_others(tmp_path):
    facts, verdicts = load(RUNS[0])
    out = write_reports(tmp_path, facts, verdicts)
    assert out == tmp_path / "report.html"
    assert (tmp_path / "report.md").is_file() and json.loads((tmp_path / "report.json").read_text())["verdicts"]
    assert Page(out.read_text()).sections[0] == "bottom-line"


def test_memory_model_predictions_sit_beside_the_measured_peaks(sweep_page):
    memory = pytest.importorskip("gcdoctor.memory")
    from gcdoctor import models
    from gcdoctor.report.html_parts import fbytes

    facts, _, _ = sweep_page
    facts = Facts.from_dict(facts.to_dict())
    spec = models.load_spec(facts.model.name, layers=facts.model.n_layers)
    fits = [m for m in facts.sweep.measurements if m.fits]
    facts.memory_model = memory.memory_model_facts(spec, facts.settings.seq_len, facts.settings.dtype,
                                                   facts.settings.optimizer, "cpu",
                                                   [(m.variant, m.batch_size) for m in fits])
    html = render_html(facts, evaluate(facts))
    page = Page(html)
    assert "memory-model" in page.sections
    for m in fits:
        p = facts.memory_model.get(m.variant, m.batch_size)
        cells = page.rows[f"predicted:{m.variant}:{m.batch_size}"]
        assert cells[:5] == [m.variant, str(m.batch_size), fbytes(p.peak_bytes), fbytes(m.peak_allocated_bytes),
                             f"{100 * (p.peak_bytes / m.peak_allocated_bytes - 1):+.1f}%"]
    assert html_lib.escape("Dashed: the memory model's prediction.") in html


def test_reports_written_elsewhere_draw_the_timeline_from_the_source_run(sweep_page, tmp_path):
    facts, verdicts, _ = sweep_page
    without = write_reports(tmp_path / "a", facts, verdicts).read_text()
    with_source = write_reports(tmp_path / "b", facts, verdicts, source_dir=SWEEP_RUN).read_text()
    assert " over the run" not in without and " over the run" in with_source
