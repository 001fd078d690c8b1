"""GC011 launch-cost-headroom, on the recorded H200 granularity run's what-if (and variations of it)."""
from __future__ import annotations

from pathlib import Path

import pytest

from gcdoctor.engine import evaluate
from gcdoctor.facts import Facts
from gcdoctor.facts.granularity import LaunchEmulation, derive_whatif
from gcdoctor.rules import find_rule
from gcdoctor.trace.launch_response import fill_whatif

RUN = Path(__file__).resolve().parents[1] / "samples" / "h200-llama3-8b-diagnose"


@pytest.fixture
def facts():
    f = Facts.load(RUN / "facts.json")
    fill_whatif(f, RUN)
    return f


def _gc011(facts, **th):
    return [v for v in evaluate(facts, overrides={"GC011": th} if th else None) if v.code == "GC011"]


def test_h200_has_several_times_the_launch_cost_in_hand(facts):
    (v,) = _gc011(facts)
    assert v.status == "passed" and v.scope == "experiment" and v.topic == "granularity" and v.line == ""
    assert v.headline.startswith("model: every variant stays device-bound up to 52 us (fine) to 66 us "
                                 "(selective-mlp) per launch, 6.0-7.6x this device's 8.7 us")
    assert "at 100 us per launch layer would cost +25% (+13% here)" in v.headline
    labels = [e.label for e in v.evidence]
    assert "layer: break-even launch cost (6.1x)" in labels
    assert "fine: predicted step at 100 us per launch (vs none)" in labels


def test_a_host_barely_ahead_of_the_device_is_a_warning(facts):
    g = facts.granularity
    for row in g.group("model").variants:
        row.whatif.slack_ms = 5.0  # 5 ms of host slack per step over ~1,500 launches: ~3 us per launch
    derive_whatif(g)
    (v,) = _gc011(facts)
    assert v.status == "fired" and v.severity == "warning" and v.subject == "model/layer"
    assert "only up to 11.9 us per launch, this device's 8.7 us: it is 1.4x from host-bound" in v.headline
    assert v.line == "launches cost 8.7 us here: layer checkpointing is 1.4x from host-bound"
    assert "fastest variant that saves at least 10% of the activations" in v.recommendation
    # a lower bar accepts the same facts
    (ok,) = _gc011(facts, min_headroom=1.2)
    assert ok.status == "passed"


def test_an_emulated_run_says_its_cost_is_emulated(facts):
    g = facts.granularity
    g.emulation = LaunchEmulation(target_us=40.0, readback_extra_us=40.3)
    (v,) = _gc011(facts)
    assert "the emulated 8.7 us (+40 us per op)" in v.headline
    assert "read back +40.3 us" in v.explanation


def test_without_the_whatif_or_on_the_cpu_it_says_why(facts):
    for row in facts.granularity.group("model").variants:
        row.whatif = None
    (v,) = _gc011(facts)
    assert v.status == "inconclusive"
    cpu = Facts.load(Path(__file__).resolve().parents[1] / "samples" / "granularity" / "cpu-tiny-llama" / "facts.json")
    fill_whatif(cpu, None)
    (v,) = _gc011(cpu)
    assert v.status == "inconclusive" and "the host is the device" in v.headline


def test_explain_reads_well():
    rule = find_rule("launch-cost-headroom")
    assert rule.code == "GC011"
    doc = rule.doc()
    for section in ("What it checks:", "Why it matters:", "Evidence:", "How to fix:"):
        assert section in doc
