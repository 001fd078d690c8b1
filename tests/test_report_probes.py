"""The granularity, offload and jitter sections of report.html against the facts of every recorded
run under samples/ that has them (the parameter lists grow as runs are recorded)."""
from __future__ import annotations

from html.parser import HTMLParser
from pathlib import Path

import pytest

from gcdoctor.engine import evaluate
from gcdoctor.facts import Facts
from gcdoctor.report.html import render_html
from gcdoctor.report.html_parts import fnum, fpct

SAMPLES = Path(__file__).resolve().parents[1] / "samples"
RUNS = sorted(p.parent for p in SAMPLES.rglob("facts.json"))


def runs_with(section: str, attr: str) -> list[Path]:
    return [r for r in RUNS if getattr(getattr(Facts.load(r / "facts.json"), section), attr, None)]


class Rows(HTMLParser):
    """Cell texts of every table row that has a data-row id."""

    def __init__(self, text: str) -> None:
        super().__init__(convert_charrefs=True)
        self.rows: dict[str, list[str]] = {}
        self._row: str | None = None
        self._cell: list[str] | None = None
        self.feed(text)

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        if tag == "tr" and "data-row" in a:
            self._row = a["data-row"]
            self.rows[self._row] = []
        elif tag == "td" and self._row is not None:
            self._cell = []

    def handle_endtag(self, tag):
        if tag == "td" and self._cell is not None and self._row is not None:
            self.rows[self._row].append("".join(self._cell).strip())
            self._cell = None
        elif tag == "tr":
            self._row = None

    def handle_data(self, data):
        if self._cell is not None:
            self._cell.append(data)


def render(run: Path) -> tuple[Facts, str]:
    facts = Facts.load(run / "facts.json")
    return facts, render_html(facts, evaluate(facts), run_dir=run)


def section_of(html: str, sid: str) -> str:
    start = html.index(f'<section id="{sid}"')
    return html[start:html.index("</section>", start)]


@pytest.mark.parametrize("run", runs_with("granularity", "groups"), ids=lambda r: r.name)
def test_granularity_rows_show_step_time_and_trade_off(run):
    facts, html = render(run)
    rows = Rows(section_of(html, "granularity")).rows
    for g in facts.granularity.groups:
        for v in g.variants:
            cells = rows[f"{g.name}:{v.variant}"]
            assert cells[0] == v.variant
            if v.fits:
                assert fnum(v.step_ms) in cells
                assert fpct(v.time_added_pct, signed=True) in cells
    assert section_of(html, "granularity").count("<svg") >= len([g for g in facts.granularity.groups if any(
        v.time_added_pct is not None for v in g.variants)])


@pytest.mark.parametrize("run", runs_with("offload", "variants"), ids=lambda r: r.name)
def test_offload_rows_show_step_and_copy_time(run):
    facts, html = render(run)
    rows = Rows(section_of(html, "offload")).rows
    for v in facts.offload.variants:
        cells = rows[v.variant]
        assert cells[0] == v.variant
        if v.step_ms is not None:
            assert fnum(v.step_ms) in cells
        if v.copy_ms is not None:
            assert fnum(v.copy_ms, 2) in cells


@pytest.mark.parametrize("run", runs_with("jitter", "runs"), ids=lambda r: r.name)
def test_jitter_rows_show_loss_differences_and_every_run_is_plotted(run):
    facts, html = render(run)
    sec = section_of(html, "jitter")
    rows = Rows(sec).rows
    for c in facts.jitter.comparisons:
        cells = rows[f"comparison:{c.name}"]
        worst = max(c.loss_abs_diff) if c.loss_abs_diff else None
        assert cells[5] == ("—" if worst is None else "0" if worst == 0 else f"{worst:.3g}")
        assert cells[3] == ("—" if c.losses_equal is None else "yes" if c.losses_equal else "no")
    for r in facts.jitter.runs:
        if r.losses:
            assert f"<title>{r.name}</title>" in sec  # one curve per run in the loss plot


@pytest.mark.parametrize("run", runs_with("watch", "steps"), ids=lambda r: r.name)
def test_watched_run_rows_show_every_step(run):
    facts, html = render(run)
    rows = Rows(section_of(html, "watch")).rows
    for s in facts.watch.steps:
        cells = rows[f"step:{s.index}"]
        assert cells[0] == str(s.index) and cells[1] == fnum(s.step_ms)
        if s.loss is not None:
            assert f"{s.loss:.5g}" in cells
