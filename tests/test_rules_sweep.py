"""The sweep rules (GC001-GC006) on recorded facts from a real H200 run, and on edits of them."""
from __future__ import annotations

import copy

import pytest

from gcdoctor.engine import evaluate_rule
from gcdoctor.facts import Facts, Measurement, SearchTrial, SweepFacts
from gcdoctor.rules import find_rule

from pathlib import Path

SAMPLES = Path(__file__).resolve().parents[1] / "samples"

H200 = SAMPLES / "h200-llama3-8b-2layers-sweep" / "facts.json"


@pytest.fixture
def h200() -> Facts:
    return Facts.load(H200)


def judge(code: str, facts: Facts, **overrides):
    rule = find_rule(code)
    return evaluate_rule(rule, facts, {code: overrides} if overrides else None)


def m(variant, batch, step_ms, peak, states=100, fits=True):
    return Measurement(probe="sweep", variant=variant, batch_size=batch, seq_len=128, fits=fits,
                       step_ms=[step_ms] * 3, step_ms_median=step_ms, peak_allocated_bytes=peak,
                       param_bytes=states // 4, grad_bytes=states // 4, optimizer_state_bytes=states // 2)


def test_gc001_passes_on_the_h200_run(h200):
    [v] = judge("GC001", h200)
    assert (v.status, v.severity) == ("passed", "ok")
    assert v.headline == "Checkpointing costs 11% step time at batch 2, inside the normal band (5-35%)"
    assert {e.label for e in v.evidence} >= {"step without GC", "step with GC", "recompute share of device time (GC)"}


def test_gc001_fires_when_recompute_costs_too_much(h200):
    slow = copy.deepcopy(h200)
    on = slow.sweep.get("gc", 2)
    on.step_ms = [x * 1.4 for x in on.step_ms]
    on.step_ms_median *= 1.4
    [v] = judge("GC001", slow)
    assert (v.status, v.severity) == ("fired", "warning")
    assert v.headline.startswith("Checkpointing slows the step by 56% at batch 2")
    [v] = judge("GC001", slow, max_overhead_pct=60)
    assert v.status == "passed"


def test_gc001_says_when_nothing_is_recomputed():
    f = Facts(sweep=SweepFacts(measurements=[m("no_gc", 4, 100.0, 500), m("gc", 4, 101.0, 450)]))
    [v] = judge("GC001", f)
    assert (v.status, v.severity) == ("fired", "info")
    assert "little or nothing is recomputed" in v.headline


def test_gc001_refuses_noisy_timings():
    noisy = m("gc", 4, 150.0, 450)
    noisy.step_ms = [120.0, 150.0, 200.0]
    f = Facts(sweep=SweepFacts(measurements=[m("no_gc", 4, 100.0, 500), noisy]))
    [v] = judge("GC001", f)
    assert v.status == "inconclusive"
    assert "vary by 53% from step to step" in v.headline


def test_gc002_fires_on_the_h200_run_where_the_loss_dominates(h200):
    [v] = judge("GC002", h200)
    assert (v.status, v.severity) == ("fired", "warning")
    assert v.headline == "Checkpointing saved only 24% of activation memory at batch 2"
    assert "the peak is the loss, not the layers" in v.explanation


def test_gc002_passes_when_activations_shrink():
    f = Facts(sweep=SweepFacts(measurements=[m("no_gc", 4, 100.0, 1100), m("gc", 4, 130.0, 300)]))
    [v] = judge("GC002", f)  # activations 1000 -> 200 bytes: 80% saved
    assert v.status == "passed"
    assert v.headline.startswith("Checkpointing saved 80% of activation memory at batch 4")


def searched(no_gc_max, gc_max, capped=False):
    return Facts(sweep=SweepFacts(searched=True, max_batch={"no_gc": no_gc_max, "gc": gc_max},
                                  max_batch_capped={"no_gc": False, "gc": capped},
                                  trials=[SearchTrial("no_gc", 1, no_gc_max is not None)],
                                  measurements=[m("no_gc", 1, 100.0, 300), m("gc", 1, 125.0, 250)]))


@pytest.mark.parametrize("no_gc, gc, capped, status, severity, headline", [
    (2, 13, False, "passed", "ok", "Checkpointing raises the largest batch from 2 to 13 (6.5x)"),
    (8, 10, False, "fired", "warning", "Checkpointing raises the largest batch only from 8 to 10 (1.25x)"),
    (None, 4, False, "fired", "info", "Checkpointing is required: batch 1 does not fit without it; with it, 4 fits"),
    (None, None, False, "fired", "critical", "Batch 1 does not fit, with or without checkpointing"),
    (4, 256, True, "passed", "ok", "Checkpointing raises the largest batch from 4 to at least 256 (64.0x)"),
])
def test_gc003_oom_boundary(no_gc, gc, capped, status, severity, headline):
    [v] = judge("GC003", searched(no_gc, gc, capped))
    assert (v.status, v.severity, v.headline) == (status, severity, headline)


def test_gc003_needs_a_search_and_says_who_fixed_the_batch_sizes(h200):
    [v] = judge("GC003", h200)  # recorded before the sweep said who fixed them
    assert v.status == "inconclusive"
    assert v.headline.endswith("batch sizes were fixed (--batch-sizes): no search for the largest batch")
    cpu = copy.deepcopy(h200)
    cpu.sweep.fixed_by = "cpu-default"  # the CPU without --memory-limit, nothing passed by the user
    [v] = judge("GC003", cpu)
    assert v.status == "inconclusive" and "--batch-sizes" not in v.headline
    assert v.headline.endswith("on the CPU without --memory-limit the sweep measures a few fixed batch sizes: "
                               "no search for the largest batch (give --memory-limit)")


def test_gc004_on_the_h200_and_on_a_smaller_card(h200):
    [v] = judge("GC004", h200)
    assert v.status == "passed" and v.headline == "Model states take 8% of the device's memory"
    small = copy.deepcopy(h200)
    small.environment.total_memory_bytes = 16 * 2**30  # the same states on a 16 GiB card
    [v] = judge("GC004", small)
    assert (v.status, v.severity) == ("fired", "warning")
    assert v.headline.startswith("Model states take 69% of the device's memory")


@pytest.mark.parametrize("target, status, severity, start", [
    (None, "passed", "ok", "Without checkpointing, batches up to 2 fit"),  # the boundary; GC007 weighs it
    (2, "fired", "warning", "Checkpointing is unneeded: the target batch 2 fits without it"),
    (8, "inconclusive", "inconclusive", "Checkpointing unneeded: could not be judged: the target batch 8 was not measured"),
])
def test_gc005_target_batch(h200, target, status, severity, start):
    h200.sweep.target_batch = target
    [v] = judge("GC005", h200)
    assert (v.status, v.severity) == (status, severity)
    assert v.headline.startswith(start)


def test_gc006_recompute_share(h200):
    [v] = judge("GC006", h200)
    assert v.status == "passed" and v.subject == "sweep/gc"
    heavy = copy.deepcopy(h200)
    tm = heavy.trace["sweep/gc"]
    tm.recompute_busy_us = 0.5 * tm.busy_us
    tm.recompute_share = 0.5
    [v] = judge("GC006", heavy)
    assert (v.status, v.severity) == ("fired", "warning")
    assert v.headline == "sweep/gc: recomputation takes 50% of device busy time (expected about 25%)"


def test_rules_without_their_facts_are_inconclusive_with_the_reason():
    f = Facts()
    f.unavailable["sweep"] = "probe failed: CUDA error"
    [v] = judge("GC001", f)
    assert v.status == "inconclusive"
    assert v.headline == "Recompute overhead: could not be judged: probe failed: CUDA error"
