"""Property-based fuzzing of the facts loader, the rules and every writer (hypothesis).

Real recorded facts.json files, mutated at random paths with hostile JSON values (null, negative
and 70-bit integers, huge floats, wrong types, markup, terminal escapes, bidi overrides, deep
nesting), must either be refused by the loader with gcdoctor's one-line error or load, be judged
and be written to JSON, Markdown, HTML and the terminal without an exception, and without hostile
text reaching a sink raw. The bugs these found are kept as explicit regression cases below.
"""
from __future__ import annotations

import copy
import json
import re
import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gcdoctor.engine import evaluate
from gcdoctor.errors import UserError
from gcdoctor.facts import Facts
from gcdoctor.facts.serde import FactsDecodeError
from gcdoctor.report.console import summary
from gcdoctor.report.html import render_html
from gcdoctor.report.json_report import render_json
from gcdoctor.report.markdown import render_markdown

REPO = Path(__file__).resolve().parents[1]
SAMPLES = ["cpu-tiny-llama-sweep", "cpu-tiny-llama-sgd", "jitter/cpu-fp32", "watch/cpu-tiny-llama-trainer",
           "h200-monitor-20hz", "h200-llama3-8b-2layers-sweep"]
BASES = {name: json.loads((REPO / "samples" / name / "facts.json").read_text()) for name in SAMPLES}
RAW_MARKUP = re.compile(r"<(script|img)|(?<!\\)\]\(javascript:")  # a tag or a link that a renderer would act on
EMPTY_DIR = tempfile.mkdtemp(prefix="gcdoctor-fuzz-")  # HTML writer's run_dir: no telemetry.csv

HOSTILE_TEXT = ["<script>alert(1)</script>", "<img src=x onerror=alert(1)>", "[x](javascript:alert(1))",
                "\x1b[2J\x1b[31mred", "\r\x07\x08", "\u202egnp.exe", "a|b`c*d_e", "../../etc/passwd", '"quoted"',
                "", "x" * 5000]
scalars = st.one_of(
    st.none(), st.booleans(),
    st.integers(min_value=-(2 ** 70), max_value=2 ** 70),
    st.sampled_from([0, -1, 1, 2 ** 63, -(2 ** 63), 2 ** 64]),
    st.floats(allow_nan=False, allow_infinity=False),
    st.sampled_from([1e308, -1e308, 5e-324, -0.0]),
    st.sampled_from(HOSTILE_TEXT), st.text(max_size=40),
)
values = st.recursive(scalars, lambda inner: st.one_of(st.lists(inner, max_size=3),
                                                       st.dictionaries(st.text(max_size=8), inner, max_size=3)),
                      max_leaves=6)


@st.composite
def mutated_facts(draw):
    name = draw(st.sampled_from(SAMPLES))
    data = copy.deepcopy(BASES[name])
    for _ in range(draw(st.integers(1, 4))):
        node = data
        while True:  # descend a random path; stop at a random depth
            keys = list(node) if isinstance(node, dict) else list(range(len(node)))
            if not keys:
                break
            key = draw(st.sampled_from(keys))
            child = node[key]
            if isinstance(child, (dict, list)) and child and draw(st.booleans()):
                node = child
                continue
            if isinstance(node, dict) and draw(st.integers(0, 9)) == 0:
                del node[key]
            else:
                node[key] = draw(values)
            break
    return data


def check_sinks(facts: Facts) -> None:
    """Judge and write every format; no exception, no hostile text raw in any sink."""
    verdicts = evaluate(facts)
    json.dumps(render_json(facts, verdicts), allow_nan=False)
    md = render_markdown(facts, verdicts)
    assert not RAW_MARKUP.search(md) and "\x1b" not in md
    html = render_html(facts, verdicts, run_dir=EMPTY_DIR)
    assert "<script>alert" not in html and "<img src=x" not in html
    text = summary(facts, verdicts, "report.html")
    assert "\x1b" not in text and "\x07" not in text and "\u202e" not in text


def load_or_refuse(data) -> Facts | None:
    try:
        return Facts.from_dict(data)
    except FactsDecodeError:
        return None


@settings(max_examples=500, deadline=None, suppress_health_check=list(HealthCheck), derandomize=True)
@given(mutated_facts())
def test_mutated_facts_load_or_are_refused_and_every_writer_survives(data) -> None:
    facts = load_or_refuse(data)
    if facts is None:
        return
    check_sinks(facts)


@settings(max_examples=250, deadline=None, suppress_health_check=list(HealthCheck), derandomize=True)
@given(values)
def test_any_json_document_is_a_facts_file_or_a_one_line_error(doc) -> None:
    with tempfile.TemporaryDirectory() as d:
        p = Path(d) / "facts.json"
        p.write_text(json.dumps(doc))
        try:
            facts = Facts.load(p)
        except UserError as exc:
            assert "\n" not in str(exc)
            return
        check_sinks(facts)


# -- regression cases: the seeds of the bugs found (hardening and this fuzzing) --------------------
def _sweep(**edit) -> dict:
    data = copy.deepcopy(BASES["cpu-tiny-llama-sweep"])
    m = data["sweep"]["measurements"][0]
    m.update(edit)
    return data


@pytest.mark.parametrize("data", [
    _sweep(step_ms_median=None),  # a null step time crashed the HTML writer
    _sweep(step_ms_median=0.0, tokens_per_s=0.0),
    _sweep(variant="<script>alert(1)</script>\x1b[2J"),  # hostile text in every sink
    {**BASES["h200-monitor-20hz"], "jitter": {}},  # fuzzing: an empty jitter section crashed report.md
])
def test_regression_writers(data) -> None:
    facts = load_or_refuse(data)
    assert facts is not None
    check_sinks(facts)


@pytest.mark.parametrize("data, field", [
    (_sweep(batch_size=-4), "batch_size"),  # a negative batch crashed the HTML writer (log of it)
    (_sweep(batch_size=0), "batch_size"),  # fuzzing: math domain error in the HTML plot
    (_sweep(step_ms_median=-1.0), "step_ms_median"),
])
def test_regression_impossible_values_are_refused_on_load(data, field) -> None:
    with pytest.raises(FactsDecodeError, match=field):
        Facts.from_dict(data)


@pytest.mark.parametrize("edit, needle", [
    ({"schema_version": 999}, "newer gcdoctor"),  # accepted and re-saved
    ({"schema_version": "1"}, "schema_version"),
    ({"settings": {"measure_steps": 2 ** 70}}, "out of range"),  # 70-bit integer
    ({"settings": {"seq_len": None}}, "Expected `int`"),  # null where no null is allowed
    ({"settings": {"interrupted": 1}}, "Expected `bool`"),
])
def test_regression_loader_refuses(tmp_path: Path, edit, needle) -> None:
    data = copy.deepcopy(BASES["cpu-tiny-llama-sweep"])
    for k, v in edit.items():
        if isinstance(v, dict) and isinstance(data.get(k), dict):
            data[k].update(v)
        else:
            data[k] = v
    p = tmp_path / "facts.json"
    p.write_text(json.dumps(data))
    with pytest.raises(UserError, match=needle):
        Facts.load(p)


def test_regression_deep_nesting_is_one_line(tmp_path: Path) -> None:
    p = tmp_path / "facts.json"
    p.write_text("[" * 100_000 + "]" * 100_000)
    with pytest.raises(UserError):
        Facts.load(p)
