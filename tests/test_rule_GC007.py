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


def _with_fresh_boundaries(facts: Facts, default: int, expandable: int | None, kind: str = "cuda") -> Facts:
    """The H200 sweep plus what the allocator probe would add for layer checkpointing: the
    boundary in fresh processes, and the expandable-segments process's point at its boundary
    (timed as the sweep's batch 11, 7 % faster per token)."""
    import dataclasses

    from gcdoctor.facts import AllocatorFacts
    from gcdoctor.facts.sweep import AllocatorBoundary, FreshRun

    facts.environment.device_kind = kind
    al = facts.allocator = AllocatorFacts(steps=2)
    al.boundaries.append(AllocatorBoundary(variant="gc", allocator="default", largest_batch=default,
                                           first_oom_batch=default + 1, in_process=11))
    if expandable is not None:
        ref = facts.sweep.get("gc", 11)
        m = dataclasses.replace(ref, batch_size=expandable, tokens_per_s=ref.tokens_per_s * 1.07)
        al.boundaries.append(AllocatorBoundary(variant="gc", allocator="expandable", largest_batch=expandable,
                                               in_process=11))
        al.runs.append(FreshRun(variant="gc", allocator="expandable", batches=[expandable], measurements=[m]))
    return facts


def test_a_batch_only_expandable_segments_hold_is_prescribed_with_that_setting():
    v = judge(_with_fresh_boundaries(facts_of("h200-llama3-8b-diagnose"), default=11, expandable=13))
    assert v.headline == "Use layer checkpointing at batch 13: 8,809 tokens/s"
    assert v.line.startswith("layer checkpointing at batch 13 (expandable segments): 8,809 tok/s; ")
    assert v.recommendation == (
        "Train at per-device batch 13 and checkpoint every decoder layer with "
        "gradient_checkpointing_enable(use_reentrant=False), with "
        "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True in the job's environment (set before the device "
        "initialises).")
    ev = {e.label: e.value for e in v.evidence}
    assert ev["largest batch in a fresh process, default allocator, layer checkpointing"] == 11
    assert ev["largest batch in a fresh process, expandable segments, layer checkpointing"] == 13
    assert "runs out of memory with the default allocator (it holds 11 in a fresh process)" in v.explanation


def test_musa_names_torch_musas_allocator_variable():
    v = judge(_with_fresh_boundaries(facts_of("h200-llama3-8b-diagnose"), default=11, expandable=13, kind="musa"))
    assert "PYTORCH_MUSA_ALLOC_CONF=expandable_segments:True" in v.recommendation


def test_a_boundary_that_fails_fresh_is_not_prescribed():
    # the sweep fit 11 after smaller batches; a fresh process holds 10 and nothing measured more
    v = judge(_with_fresh_boundaries(facts_of("h200-llama3-8b-diagnose"), default=10, expandable=None))
    assert v.headline.startswith("Use layer checkpointing at batch 10: ")
    assert "expandable" not in v.recommendation
