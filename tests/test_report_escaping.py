"""Hostile names from a trace, a config or the facts must not inject markup into report.html or the
compare page: everything is escaped, in text, in attributes and inside the SVG plots."""
from __future__ import annotations

import copy
import csv
import json
import shutil
from html.parser import HTMLParser
from pathlib import Path

import pytest

from gcdoctor.engine import evaluate
from gcdoctor.types import Evidence, Verdict
from gcdoctor.facts import Facts, SearchTrial, SeriesSummary, TraceMetrics
from gcdoctor.report.compare import load_run, render_compare_html
from gcdoctor.report.html import render_html

SAMPLES = Path(__file__).resolve().parents[1] / "samples"
RUNS = sorted(p.parent for p in SAMPLES.rglob("facts.json"))
SCRIPT = "<script>alert(1)</script>"
IMG = '"><img src=x onerror=alert(2)>'
ATTR = "' onmouseover='alert(3)"
HOSTILE = [SCRIPT, IMG, ATTR]


class Tags(HTMLParser):
    """Every element and attribute the browser would build from the page."""

    def __init__(self, text: str) -> None:
        super().__init__(convert_charrefs=True)
        self.tags: list[str] = []
        self.attrs: list[tuple[str, str | None]] = []
        self.texts: list[str] = []
        self.feed(text)

    def handle_starttag(self, tag, attrs):
        self.tags.append(tag)
        self.attrs += attrs

    def handle_data(self, data):
        self.texts.append(data)


def assert_inert(html: str, must_show: list[str]) -> None:
    t = Tags(html)
    assert not set(t.tags) & {"script", "img", "iframe", "object", "embed"}
    assert not [a for a, _ in t.attrs if a.startswith("on")]
    for raw in HOSTILE:
        assert raw not in html
    text = "".join(t.texts)
    for s in must_show:  # shown to the reader as text, not swallowed
        assert s in text, s


def _first(section: str, attr: str):
    for run in RUNS:
        value = getattr(Facts.load(run / "facts.json"), section)
        if getattr(value, attr, None):
            return value
    return None


def poisoned_facts() -> Facts:
    """A recorded sweep, plus the probe sections of other recorded runs, with hostile names everywhere."""
    run = next((r for r in RUNS if Facts.load(r / "facts.json").sweep is not None), None)
    if run is None:
        pytest.skip("no recorded sweep under samples/")
    facts = Facts.load(run / "facts.json")
    facts.granularity = _first("granularity", "groups")
    if facts.granularity is not None:
        g = facts.granularity.groups[0]
        g.name, g.description, g.variants[-1].variant = SCRIPT, IMG, ATTR
    facts.offload = _first("offload", "variants")
    if facts.offload is not None:
        v = facts.offload.variants[-1]
        v.variant, v.on_host, v.description = SCRIPT, IMG, ATTR
        v.notes.append(SCRIPT)
    facts.jitter = _first("jitter", "runs")
    if facts.jitter is not None:
        facts.jitter.runs[-1].name = SCRIPT
        facts.jitter.runs[-1].warnings.append(IMG)
        if facts.jitter.comparisons:
            facts.jitter.comparisons[-1].name = ATTR
            facts.jitter.comparisons[-1].run = SCRIPT
    facts.model.name = SCRIPT
    facts.model.source = IMG
    facts.environment.device_name = IMG
    facts.environment.driver = ATTR
    facts.environment.host = SCRIPT
    facts.settings.probes = [SCRIPT]
    facts.settings.error = IMG
    facts.unavailable[SCRIPT] = IMG
    if facts.sweep is not None and facts.sweep.measurements:
        m = copy.deepcopy(next(m for m in facts.sweep.measurements if m.fits))
        m.variant = SCRIPT  # a third variant: its name reaches the SVG legend and point titles
        m.telemetry = {IMG: SeriesSummary(mean=1.0, min=1.0, max=1.0, n=1)}
        facts.sweep.measurements.append(m)
        facts.sweep.trials.append(SearchTrial(variant=SCRIPT, batch_size=m.batch_size * 2, fits=False,
                                              oom_phase=IMG))
        facts.sweep.max_batch[SCRIPT] = m.batch_size
        facts.sweep.gc_api = ATTR
    facts.trace[SCRIPT] = TraceMetrics(source=IMG, window=SCRIPT, device_unavailable=ATTR)
    return facts


def hostile_verdict() -> Verdict:
    return Verdict("GC999", SCRIPT, "fired", "critical", f"kernel {SCRIPT} is slow",
                   [Evidence(IMG, 3.0, ATTR), Evidence("name", SCRIPT)], f"because {IMG}", f"rename {ATTR}", SCRIPT)


def test_hostile_facts_and_verdicts_render_inert():
    facts = poisoned_facts()
    html = render_html(facts, evaluate(facts) + [hostile_verdict()])
    assert_inert(html, [SCRIPT, IMG, ATTR])
    for sid, present in (("granularity", facts.granularity), ("offload", facts.offload), ("jitter", facts.jitter)):
        if present is not None:  # the hostile names reached the probe's own section, escaped
            sec = html[html.index(f'<section id="{sid}"'):]
            assert "&lt;script&gt;alert(1)&lt;/script&gt;" in sec[:sec.index("</section>")], sid


def test_hostile_names_inside_svg_plots_are_escaped():
    facts = poisoned_facts()
    html = render_html(facts, [])
    svgs = [s for s in html.split("<svg")[1:]]
    assert svgs
    joined = "".join(s.split("</svg>")[0] for s in svgs)
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in joined  # the variant's legend entry and point titles


def test_hostile_telemetry_columns_and_events_in_a_run_directory(tmp_path):
    run = next((r for r in RUNS if (r / "telemetry.csv").is_file()), None)
    if run is None:
        pytest.skip("no recorded run with telemetry.csv")
    rd = tmp_path / "run"
    rd.mkdir()
    shutil.copy(run / "facts.json", rd / "facts.json")
    with open(run / "telemetry.csv", newline="") as fh:
        rows = list(csv.reader(fh))
    rows[0] = rows[0] + ["gpu0.util_pct", f"gpu0.{IMG}"]
    rows[1:] = [r + ["50", "1"] for r in rows[1:]]
    with open(rd / "telemetry.csv", "w", newline="") as fh:
        csv.writer(fh).writerows(rows)
    wall = float(rows[-1][1])
    (rd / "events.jsonl").write_text(json.dumps({"type": "StepMeasured", "wall": wall, "probe": SCRIPT,
                                                 "variant": IMG, "batch_size": 1, "step_index": 0,
                                                 "step_ms": 10.0, "phase": ATTR}) + "\n")
    (rd / "config.json").write_text(json.dumps({"memory_limit_bytes": 1 << 30, "model": SCRIPT}))
    facts = Facts.load(rd / "facts.json")
    html = render_html(facts, evaluate(facts), run_dir=rd)
    assert " over the run" in html
    assert_inert(html, [IMG])


def test_compare_page_escapes_hostile_runs(tmp_path):
    facts = poisoned_facts()
    for name in ("a", "b"):
        (tmp_path / name).mkdir()
        facts.save(tmp_path / name / "facts.json")
    a, b = load_run(tmp_path / "a"), load_run(tmp_path / "b")
    b.verdicts.append(hostile_verdict())
    html = render_compare_html(a, b)
    assert_inert(html, [SCRIPT, IMG])
