"""The report model: every writer shows exactly what a section's table entry holds, and a new section
renders in Markdown, HTML and compare from its entry alone."""
from __future__ import annotations

import re
from html.parser import HTMLParser
from pathlib import Path

import pytest

from gcdoctor.engine import evaluate
from gcdoctor.facts import Facts
from gcdoctor.report import compare, sections
from gcdoctor.report.html import render_html
from gcdoctor.report.markdown import render_markdown
from gcdoctor.report.model import (Column, Key, Section, Table, change, drop_empty_columns, format_value,
                                   format_with_unit)

SAMPLES = Path(__file__).resolve().parents[1] / "samples"
RUNS = sorted(p.parent for p in SAMPLES.rglob("facts.json"))


class Rows(HTMLParser):
    """Cell texts of every table row that has a data-row id, and the header of its table."""

    def __init__(self, text: str) -> None:
        super().__init__(convert_charrefs=True)
        self.rows: dict[str, list[str]] = {}
        self.headers: dict[str, list[str]] = {}
        self._head: list[str] = []
        self._row: str | None = None
        self._cell: list[str] | None = None
        self._th: list[str] | None = None
        self.feed(text)

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        if tag == "thead":
            self._head = []
        elif tag == "th" and self._row is None:
            self._th = []
        elif tag == "tr" and "data-row" in a:
            self._row = a["data-row"]
            assert self._row not in self.rows, f"duplicate row id {self._row}"
            self.rows[self._row] = []
            self.headers[self._row] = list(self._head)
        elif tag == "td" and self._row is not None:
            self._cell = []

    def handle_endtag(self, tag):
        if tag == "td" and self._cell is not None and self._row is not None:
            self.rows[self._row].append("".join(self._cell).strip())
            self._cell = None
        elif tag == "th" and self._th is not None:
            self._head.append("".join(self._th).strip())
            self._th = None
        elif tag == "tr":
            self._row = None

    def handle_data(self, data):
        if self._cell is not None:
            self._cell.append(data)
        elif self._th is not None:
            self._th.append(data)


def expected_cells(t: Table, facts: Facts) -> dict[str, list[str]]:
    rows = t.rows(facts)
    cols, kept = drop_empty_columns(t, rows)
    return {f"{t.id}:{t.key_of(r)}": [format_value(v, c.unit) for v, c in zip(k, cols)] for r, k in zip(rows, kept)}


@pytest.mark.parametrize("run", RUNS, ids=[r.name for r in RUNS])
def test_every_table_cell_of_every_recorded_run_is_the_tables_value_in_html_and_markdown(run):
    facts = Facts.load(run / "facts.json")
    verdicts = evaluate(facts)
    page = Rows(render_html(facts, verdicts, run_dir=run))
    md = render_markdown(facts, verdicts)
    checked = 0
    for s in sections.present(facts):
        for t in s.tables(facts):
            for rid, cells in expected_cells(t, facts).items():
                assert page.rows[rid] == cells, rid
                assert "| " + " | ".join(c.replace("|", "\\|") for c in cells) + " |" in md.replace("\\[", "[").replace(
                    "\\]", "]").replace("&lt;", "<").replace("&gt;", ">").replace("&amp;", "&").replace("\\`", "`"), rid
                checked += 1
        for k in s.keys(facts):
            assert page.rows[f"{s.id}:{k.id}"] == [k.label, format_with_unit(k.value, k.unit)]
    assert checked > 0 or not sections.present(facts)


def _probe_section() -> Section:
    """A section of a probe gcdoctor does not have, reading a field every Facts has."""
    def rows(f: Facts) -> list[list]:
        return [["alpha", 3, 12.5, 0.25], ["beta", 4, None, 0.5]]
    return Section(id="newprobe", title="A new probe", facts="environment", present=lambda f: True,
                   lead=lambda f: "What the new probe measured.",
                   keys=lambda f: [Key("newprobe-key", "the new probe's headline", 42.0, "ms")],
                   tables=lambda f: [Table("newprobe", [Column("case", key=True), Column("n", "int"),
                                                        Column("time", "ms", compare=True),
                                                        Column("share", "share", compare=True)], rows)],
                   topics=("newprobe",))


def test_a_new_section_renders_in_markdown_html_and_compare_from_its_entry_alone(monkeypatch, capsys):
    monkeypatch.setattr(sections, "SECTIONS", sections.SECTIONS + [_probe_section()])
    run = SAMPLES / "cpu-tiny-llama-sweep"
    facts = Facts.load(run / "facts.json")
    verdicts = evaluate(facts)
    md = render_markdown(facts, verdicts)
    assert "## A new probe" in md and "What the new probe measured." in md
    assert "| alpha | 3 | 12.5 | 25.0% |" in md and "| beta | 4 | — | 50.0% |" in md
    assert "| the new probe's headline | 42.0 ms |" in md
    page = Rows(render_html(facts, verdicts, run_dir=run))
    assert page.rows["newprobe:alpha"] == ["alpha", "3", "12.5", "25.0%"]
    assert page.headers["newprobe:alpha"] == ["case", "n", "time (ms)", "share"]
    assert page.rows["newprobe:newprobe-key"] == ["the new probe's headline", "42.0 ms"]
    text = compare.render_text(compare.load_run(run), compare.load_run(SAMPLES / "cpu-tiny-llama-sgd"))
    assert "A new probe" in text
    line = next(x for x in text.splitlines() if "alpha time" in x)
    assert re.split(r"\s{2,}", line.strip()) == ["alpha time", "12.5 ms", "12.5 ms", "same"]


@pytest.mark.parametrize("a, b, unit, expected", [
    (58.0, 19.0, "pct", "-39.0 pp"),  # never "unchanged"
    (0.58, 0.19, "share", "-39.0 pp"),
    (100.0, 150.0, "ms", "1.50x"),
    (100.0, 100.0, "ms", "same"),
    (5, None, "int", "not measured in B"),
    (None, 5, "int", "not measured in A"),
    ("fits", "OOM (forward)", "text", "differs"),
])
def test_change_says_how_b_differs_from_a(a, b, unit, expected):
    assert change(a, b, unit) == expected


@pytest.mark.parametrize("value, unit, shown", [
    (None, "ms", "—"), (float("nan"), "ms", "—"), (1234.5, "ms", "1,234.5"), (3.14159, "ms", "3.14"),
    (3 * 2**30, "bytes", "3.00 GiB"), (5 * 2**20, "bytes", "5.0 MiB"), (0.253, "share", "25.3%"),
    (22.0, "pct+", "+22.0%"), (9224.54, "tok/s", "9,225"), (5.5, "x", "5.50x"), (0.0, "sci", "0"),
    (1.23e-5, "sci", "1.23e-05"), (True, "text", "yes"), (11, "int", "11"),
])
def test_format_value_by_unit(value, unit, shown):
    assert format_value(value, unit) == shown


def test_an_unknown_unit_is_refused_when_the_column_is_declared():
    with pytest.raises(ValueError, match="unknown unit"):
        Column("x", "furlongs")
