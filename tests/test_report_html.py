"""report.html rendered from real recorded runs under samples/: the answer on the first screen, the
sections in the model's order, configuration and experiments counted apart, and a self-contained page."""
from __future__ import annotations

import html as html_lib
import json
import re
from html.parser import HTMLParser
from pathlib import Path

import pytest

from gcdoctor.engine import evaluate
from gcdoctor.types import EXPERIMENT
from gcdoctor.facts import Facts
from gcdoctor.report import sections, write_reports
from gcdoctor.report.bottom_line import bottom_line_for
from gcdoctor.report.html import render_html
from gcdoctor.report.verdicts import configuration_findings

SAMPLES = Path(__file__).resolve().parents[1] / "samples"
SWEEP_RUN = SAMPLES / "cpu-tiny-llama-sweep"  # diagnose --probes sweep --memory-limit 400MB on the CPU
H200 = SAMPLES / "h200-llama3-8b-diagnose"  # the full default diagnose of llama3-8b on the H200
RUNS = sorted(p.parent for p in SAMPLES.rglob("facts.json"))


class Page(HTMLParser):
    """Section ids in order, verdict cards (code, severity, scope) in order, tags, band rects, the
    count chips under each scope label, and the bottom-line <pre>."""

    def __init__(self, text: str) -> None:
        super().__init__(convert_charrefs=True)
        self.sections: list[str] = []
        self.cards: list[tuple[str, str, str, str]] = []  # (section, code, severity, scope)
        self.tags: list[str] = []
        self.svg_rects: list[dict[str, str]] = []
        self.chips: dict[str, list[str]] = {}
        self._scope: str | None = None
        self._chip: list[str] | None = None
        self._label: list[str] | None = None
        self._pre: list[str] | None = None
        self.bottom_line = ""
        self.feed(text)

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        self.tags.append(tag)
        if tag == "section":
            self.sections.append(a.get("id", ""))
        elif tag == "article" and "data-code" in a:
            self.cards.append((self.sections[-1] if self.sections else "", a["data-code"], a.get("data-severity", ""),
                               a.get("data-scope", "")))
        elif tag == "rect" and "band" in a.get("class", ""):
            self.svg_rects.append(a)
        elif tag == "span" and a.get("class") == "scope-label":
            self._label = []
        elif tag == "span" and (a.get("class") or "").startswith("count ") and self._scope is not None:
            self._chip = []
        elif tag == "pre" and a.get("id") == "bottom-line-text":
            self._pre = []

    def handle_endtag(self, tag):
        if tag == "span" and self._label is not None:
            self._scope = "".join(self._label).split(" ")[0].rstrip(":")
            self.chips[self._scope] = []
            self._label = None
        elif tag == "span" and self._chip is not None:
            self.chips[self._scope].append("".join(self._chip))
            self._chip = None
        elif tag == "div":
            self._scope = None
        elif tag == "pre" and self._pre is not None:
            self.bottom_line = "".join(self._pre)
            self._pre = None

    def handle_data(self, data):
        for buf in (self._label, self._chip, self._pre):
            if buf is not None:
                buf.append(data)


def load(run: Path) -> tuple[Facts, list]:
    facts = Facts.load(run / "facts.json")
    return facts, evaluate(facts)


@pytest.fixture(scope="module")
def h200_page() -> tuple[Facts, list, str]:
    facts, verdicts = load(H200)
    return facts, verdicts, render_html(facts, verdicts, run_dir=H200)


def test_the_first_section_is_the_bottom_line_with_the_same_rows_as_the_console(h200_page):
    facts, verdicts, html = h200_page
    page = Page(html)
    assert page.sections[0] == "bottom-line" and page.sections[-1] == "environment"
    assert page.bottom_line == "\n".join(r.render() for r in bottom_line_for(facts, verdicts))
    lines = page.bottom_line.splitlines()
    assert 2 <= len(lines) <= 12 and max(len(x) for x in lines) <= 80


def test_the_first_screen_holds_only_configuration_cards(h200_page):
    facts, verdicts, html = h200_page
    page = Page(html)
    first = [(code, scope) for sec, code, _, scope in page.cards if sec == "bottom-line"]
    assert first == [(v.code, v.scope) for v in configuration_findings(verdicts)]
    assert first and all(scope == "configuration" for _, scope in first)
    # the healthy H200 run: the only card up there is the prescription
    assert [code for code, _ in first] == ["GC007"]


def test_the_header_counts_configuration_and_experiments_apart(h200_page):
    facts, verdicts, html = h200_page
    chips = Page(html).chips
    assert not any("critical" in c or "warning" in c for c in chips["Your"])
    exp = [v for v in verdicts if v.scope == EXPERIMENT and v.status == "fired"]
    crit = sum(v.severity == "critical" for v in exp)
    assert f"{crit} critical" in chips["Experiments"] and crit == 4


def test_sections_come_in_the_models_order(h200_page):
    facts, verdicts, html = h200_page
    ids = Page(html).sections
    order = [s.id for s in sections.present(facts)]
    assert [i for i in ids if i in order] == order
    assert order[:4] == ["sweep", "memory-model", "granularity", "offload"]


def test_each_section_lists_the_verdicts_of_its_topics(h200_page):
    facts, verdicts, html = h200_page
    page = Page(html)
    for s in sections.present(facts):
        shown = sorted(code for sec, code, _, _ in page.cards if sec == s.id)
        expected = sorted(v.code for v in verdicts if v.topic in s.topics and v.status in ("fired", "error"))
        assert shown == expected, s.id


def test_timeline_has_one_band_per_recorded_step():
    facts, verdicts = load(SWEEP_RUN)
    html = render_html(facts, verdicts, run_dir=SWEEP_RUN)
    page = Page(html)
    steps = sum(1 for line in (SWEEP_RUN / "events.jsonl").read_text().splitlines() if '"StepMeasured"' in line)
    panels = len(re.findall(r'aria-label="[^"]* over the run"', html))
    assert steps > 0 and panels > 0
    assert len(page.svg_rects) == steps * panels


def test_without_run_dir_no_timeline_is_drawn():
    facts, verdicts = load(SWEEP_RUN)
    assert " over the run" not in render_html(facts, verdicts)


def test_page_is_self_contained(h200_page):
    html = h200_page[2]
    tags = set(Page(html).tags)
    assert not tags & {"script", "link", "img", "iframe", "object", "embed"}
    urls = set(re.findall(r'(?:href|src|xmlns)="(https?:[^"]+)"', html))
    assert urls <= {"http://www.w3.org/2000/svg"}
    assert "@import" not in html and "url(" not in html


@pytest.mark.parametrize("run", RUNS, ids=[r.name for r in RUNS])
def test_every_recorded_run_renders_a_section_per_measured_probe(run):
    facts, verdicts = load(run)
    ids = Page(render_html(facts, verdicts, run_dir=run)).sections
    for s in sections.present(facts):
        assert s.id in ids, s.id
    assert ids[0] == "bottom-line" and ids[-1] == "environment"


def test_sections_without_facts_are_skipped():
    html = render_html(Facts(), [])
    assert Page(html).sections == ["bottom-line", "environment"]


def test_write_reports_writes_the_html_beside_the_others(tmp_path):
    facts, verdicts = load(SWEEP_RUN)
    out = write_reports(tmp_path, facts, verdicts)
    assert out == tmp_path / "report.html"
    assert (tmp_path / "report.md").is_file() and json.loads((tmp_path / "report.json").read_text())["verdicts"]
    assert Page(out.read_text()).sections[0] == "bottom-line"


def test_reports_written_elsewhere_draw_the_timeline_from_the_source_run(tmp_path):
    facts, verdicts = load(SWEEP_RUN)
    without = write_reports(tmp_path / "a", facts, verdicts).read_text()
    with_source = write_reports(tmp_path / "b", facts, verdicts, source_dir=SWEEP_RUN).read_text()
    assert " over the run" not in without and " over the run" in with_source


def test_a_memory_limit_from_config_json_is_drawn_on_the_memory_plot():
    facts, verdicts = load(SWEEP_RUN)
    html = render_html(facts, verdicts, run_dir=SWEEP_RUN)
    assert html_lib.escape("memory limit 381.47 MiB") in html  # --memory-limit 400MB, from config.json
