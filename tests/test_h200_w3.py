"""The full default diagnose of Llama-3-8B recorded on the H200 in wave 3 (every default probe,
the allocator and optimizer probes included; samples/h200-llama3-8b-diagnose-w3): what the
allocator, optimizer and prescription rules make of it."""
from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from gcdoctor.engine import evaluate_rule
from gcdoctor.facts import Facts
from gcdoctor.rules.allocator_boundary import AllocatorBoundaryRule, held_beside_bytes
from gcdoctor.rules.optimizer_step_peak import OptimizerStepPeakRule
from gcdoctor.rules.prescription import PrescriptionRule

RUN = Path(__file__).resolve().parents[1] / "samples" / "h200-llama3-8b-diagnose-w3"


@pytest.fixture
def facts() -> Facts:
    return Facts.load(RUN / "facts.json")


def _by_subject(verdicts):
    return {v.subject: v for v in verdicts}


def test_the_recording_held_the_sweeps_model_beside_the_fresh_processes(facts):
    # 15.84 GiB held on the device while they ran, less the 0.75 GiB context: the 8B model the
    # sweep left alive (fixed since; tests/test_oom.py::test_the_sweep_leaves_no_model_alive)
    assert held_beside_bytes(facts) == facts.allocator.parent_device_bytes - facts.memory_model.context_bytes
    assert round(held_beside_bytes(facts) / 2**30, 2) == 15.09


def test_fresh_ooms_beside_held_memory_are_not_judged_but_fits_are(facts):
    v = _by_subject(evaluate_rule(AllocatorBoundaryRule(), facts))
    assert v["gc"].status == "inconclusive"
    assert "15.1 GiB of device memory was held beside the fresh processes" in v["gc"].headline
    assert "do not say a job alone on the device fails there" in v["gc"].headline
    assert v["no_gc"].status == "passed"  # batch 2 fit fresh, under both allocators


def test_with_nothing_held_beside_them_the_same_ooms_are_a_warning(facts):
    facts.allocator = dataclasses.replace(facts.allocator, parent_device_bytes=facts.memory_model.context_bytes)
    v = _by_subject(evaluate_rule(AllocatorBoundaryRule(), facts))
    assert (v["gc"].status, v["gc"].severity) == ("fired", "warning")
    assert v["gc"].headline == ("With checkpointing, no batch measured fits in a fresh process (the sweep "
                                "found 11)")


def test_the_prescription_relies_on_the_sweep_where_fresh_ooms_are_inconclusive(facts):
    [v] = evaluate_rule(PrescriptionRule(), facts)
    assert v.headline == "Use layer checkpointing at batch 11: 8,261 tokens/s"
    assert "expandable" not in v.recommendation
    ev = {e.label: e.value for e in v.evidence}
    assert ev["largest batch in a fresh process, default allocator, layer checkpointing"] == "none measured fits"
    assert ev["relied on, default allocator, layer checkpointing"].startswith("11 (the sweep's")
    assert ev["largest batch in a fresh process, expandable segments, layer checkpointing"] == 11


def test_with_nothing_held_the_prescription_needs_expandable_segments(facts):
    facts.allocator = dataclasses.replace(facts.allocator, parent_device_bytes=facts.memory_model.context_bytes)
    [v] = evaluate_rule(PrescriptionRule(), facts)
    assert v.line.startswith("layer checkpointing at batch 11 (expandable segments): 8,261 tok/s")
    assert "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True" in v.recommendation


def test_an_optimizer_peak_at_the_probe_batch_only_is_a_note(facts):
    # foreach AdamW peaks at 89.8 GiB in the optimizer step at batch 1; at batch 11 the
    # forward/backward reaches 121.9 GiB: the optimizer does not limit the batch trained
    [v] = evaluate_rule(OptimizerStepPeakRule(), facts)
    assert (v.status, v.severity) == ("fired", "info")
    assert v.headline.startswith("At batch 11 the forward/backward is the peak, not the optimizer step; "
                                 "AdamW(fused=True) still speeds the step (-17% optimizer-step peak, step -8%")
    assert v.recommendation == "Use torch.optim.AdamW(params, fused=True): step time -8% at batch 1."


def test_at_the_probe_batch_itself_it_is_a_warning(facts):
    facts.sweep.target_batch = 1
    [v] = evaluate_rule(OptimizerStepPeakRule(), facts)
    assert (v.status, v.severity) == ("fired", "warning")
