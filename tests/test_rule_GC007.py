"""GC007 prescription on recorded sweeps: the fastest measured policy for the target batch, with both
throughputs, or a plain 'cannot choose' when the evidence does not carry a choice."""
from __future__ import annotations

from pathlib import Path

import pytest

from gcdoctor.engine import evaluate_rule
from gcdoctor.facts import Facts
from gcdoctor.rules.prescription import PrescriptionRule

SAMPLES = Path(__file__).resolve().parents[1] / "samples"


def facts_of(name: str) -> Facts:
    return Facts.load(SAMPLES / name / "facts.json")


def judge(facts: Facts, **thresholds):
    [v] = evaluate_rule(PrescriptionRule(), facts, {"GC007": thresholds} if thresholds else None)
    return v


def test_h200_without_a_target_prescribes_layer_checkpointing_at_the_largest_batch():
    v = judge(facts_of("h200-llama3-8b-diagnose"))
    assert (v.status, v.severity, v.scope, v.topic) == ("fired", "info", "configuration", "prescription")
    assert v.headline == "Use layer checkpointing at batch 11: 8,233 tokens/s"
    assert v.line == ("layer checkpointing at batch 11: 8,233 tok/s; no checkpointing at batch 2: 9,225 tok/s "
                      "(+12 %), faster if accumulation reaches your global batch")
    assert v.recommendation == ("Train at per-device batch 11 and checkpoint every decoder layer with "
                                "gradient_checkpointing_enable(use_reentrant=False).")
    ev = {e.label: e.value for e in v.evidence}
    assert ev["fastest batch, layer checkpointing"] == "10: 8,266 tok/s"
    assert ev["target from"] == "the largest batch any measured policy fits (no --target-batch)"


def test_a_target_both_fit_goes_to_the_faster_policy():
    facts = facts_of("h200-llama3-8b-diagnose")
    facts.sweep.target_batch = 2
    v = judge(facts)
    assert v.headline == "Use no checkpointing at batch 2: 9,225 tokens/s"
    assert v.line == "no checkpointing at batch 2: 9,225 tok/s; layer checkpointing 7,580 (-18 %)"


def test_a_target_nothing_fits_is_a_warning_naming_the_largest():
    facts = facts_of("h200-llama3-8b-diagnose")
    facts.sweep.target_batch = 20
    v = judge(facts)
    assert (v.status, v.severity) == ("fired", "warning")
    assert v.line == "no measured policy fits batch 20: the largest is 11 (layer checkpointing)"


def test_noisy_cpu_timings_refuse_to_choose():
    v = judge(facts_of("cpu-tiny-llama-sweep"))
    assert v.status == "inconclusive"
    assert v.line.startswith("no prescription: step times vary by ") and "cannot rank the policies" in v.line


def test_one_policy_only_refuses_to_choose():
    facts = facts_of("h200-llama3-8b-diagnose")
    facts.sweep.measurements = [m for m in facts.sweep.measurements if m.variant == "gc"]
    facts.sweep.max_batch.pop("no_gc")
    v = judge(facts)
    assert v.status == "inconclusive" and v.line == ("no prescription: only layer checkpointing was measured: "
                                                     "nothing to choose between")


def test_a_difference_within_the_timings_resolution_keeps_the_memory_headroom():
    facts = facts_of("h200-llama3-8b-diagnose")
    facts.sweep.target_batch = 2
    on = facts.sweep.get("gc", 2)
    off = facts.sweep.get("no_gc", 2)
    on.tokens_per_s = off.tokens_per_s / 1.02  # 2% apart: below min_difference_pct (3)
    assert judge(facts).headline.startswith("Use layer checkpointing at batch 2")
    assert judge(facts, min_difference_pct=1.0).headline.startswith("Use no checkpointing at batch 2")


@pytest.mark.parametrize("name", ["h200-llama3-8b-4layers-sweep", "h200-llama3-8b-2layers-sweep"])
def test_when_both_fit_the_largest_batch_no_checkpointing_wins_on_the_h200(name):
    v = judge(facts_of(name))
    assert v.headline.startswith("Use no checkpointing at batch ")
