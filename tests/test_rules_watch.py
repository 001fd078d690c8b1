"""The watched-run paths of GC001 (recompute overhead against the analytic extra forward) and GC005
(memory headroom from the memory model), on the recorded H200 Trainer run (Llama-3-8B, 4 layers,
seq 2048, batch 2, transformers' own checkpointing, no labels) and on edits of it."""
from __future__ import annotations

import copy
from pathlib import Path

import pytest

from gcdoctor.engine import evaluate_rule
from gcdoctor.facts import Facts
from gcdoctor.facts.watch import CheckpointingSettings
from gcdoctor.model.fitting import memory_model_facts
from gcdoctor.model.registry import load_spec
from gcdoctor.rules import find_rule
from gcdoctor.trace import compute_metrics, load_trace
from gcdoctor.trace.recompute import find_recompute
from gcdoctor.watching.watcher import recompute_facts

RUN = Path(__file__).resolve().parents[1] / "samples" / "watch" / "h200-llama3-8b-4layers-trainer"
GIB = 2**30


def watched(capacity: int | None = None) -> Facts:
    """The recorded run's facts, with what today's watcher adds computed from its recorded trace
    (recompute found without labels), the model's reported settings, and its memory model."""
    facts = Facts.load(RUN / "facts.json")
    tables = load_trace(RUN / "traces" / "watch-steps-5-6.json.gz")
    w = facts.watch
    w.recompute = recompute_facts("watch/watch-steps-5-6", compute_metrics(tables), find_recompute(tables), None, 2)
    w.checkpointing = CheckpointingSettings(enabled=True, api="transformers", layers_checkpointed=4, layers_total=4,
                                            use_reentrant=False)
    w.batch_size, w.seq_len, w.optimizer = 2, 2048, "AdamW"
    spec = load_spec("llama3-8b", layers=4)
    w.recompute.layer_forward_fraction = spec.layer_forward_share(2048, 4)
    w.recompute.expected_recompute_ms = w.recompute.forward_ms * w.recompute.layer_forward_fraction
    for s in w.steps:  # the memory model puts this run's peak in the backward (16.93 GiB, as measured)
        s.phase_peak_bytes = {"backward": s.peak_allocated_bytes}
    facts.memory_model = memory_model_facts(spec, 2048, "bf16", "adamw", "cuda", points=[("no_gc", 2), ("gc", 2)],
                                            capacity_bytes=capacity or facts.environment.total_memory_bytes)
    return facts


def judge(code: str, facts: Facts, **overrides):
    [v] = evaluate_rule(find_rule(code), facts, {code: overrides} if overrides else None)
    return v


@pytest.fixture(scope="module")
def h200() -> Facts:
    return watched()


def test_gc001_judges_the_watched_run_against_the_analytic_extra_forward(h200):
    v = judge("GC001", h200)
    rc = h200.watch.recompute
    assert (rc.kind, rc.regions_per_step, rc.time_basis) == ("non-reentrant", 4.0, "device")
    assert round(rc.recompute_ms, 2) == 11.37 and round(rc.step_ms, 2) == 93.43
    assert (v.status, v.scope, v.topic, v.subject) == ("passed", "configuration", "watch", "watch")
    assert v.headline == ("Recomputation adds 14% to the step (11.4 ms), inside the normal band (5-35%); "
                          "0.78x the analytic extra forward")
    labels = {e.label for e in v.evidence}
    assert {"analytic extra forward (forward x checkpointed layers' FLOP share)",
            "how the recompute was found"} <= labels


def test_gc001_fires_when_the_recompute_costs_too_much(h200):
    slow = copy.deepcopy(h200)
    rc = slow.watch.recompute
    rc.recompute_ms, rc.step_ms = rc.recompute_ms * 3, rc.step_ms + 2 * rc.recompute_ms
    v = judge("GC001", slow, max_recompute_vs_forward=3)  # the overhead alone
    assert (v.status, v.severity) == ("fired", "warning")
    assert v.headline == "Recomputation adds 42% to the step, above the normal band (5-35%)"
    assert judge("GC001", slow, max_overhead_pct=60, max_recompute_vs_forward=3).status == "passed"


def test_gc001_fires_when_the_layers_are_recomputed_twice(h200):
    nested = copy.deepcopy(h200)
    rc = nested.watch.recompute
    rc.step_ms += 2 * rc.expected_recompute_ms - rc.recompute_ms
    rc.recompute_ms = 2 * rc.expected_recompute_ms  # nested checkpoints: each layer's forward twice
    v = judge("GC001", nested)
    assert (v.status, v.severity) == ("fired", "warning")
    assert v.headline.startswith("Recomputation costs 2.0x the forward it repeats")
    assert "nested checkpoints" in v.explanation


def test_gc001_says_when_checkpointing_is_on_but_nothing_is_recomputed(h200):
    none = copy.deepcopy(h200)
    none.watch.recompute.found = False
    v = judge("GC001", none)
    assert (v.status, v.severity) == ("fired", "info")
    assert v.headline == ("The model reports checkpointing (4/4 layers, use_reentrant=False) but the profiled steps "
                          "recompute nothing")


def test_gc001_refuses_noisy_step_times(h200):
    noisy = copy.deepcopy(h200)
    noisy.watch.steps[3].step_ms *= 1.5
    v = judge("GC001", noisy)
    assert v.status == "inconclusive" and "vary by" in v.headline


def test_gc005_says_checkpointing_may_be_unneeded_from_the_memory_model(h200):
    v = judge("GC005", h200)
    assert (v.status, v.severity, v.scope, v.topic) == ("fired", "info", "configuration", "watch")
    assert v.headline == ("Checkpointing may be unneeded: predicted peak without it 19.9 of 139.1 GiB usable at "
                          "batch 2; its recomputation adds 14% to the step")
    err = next(e.value for e in v.evidence if e.label == "prediction error")
    assert abs(err) < 0.01  # the model predicts this run's measured peak to 50 KiB


def test_gc005_says_checkpointing_is_needed_when_the_peak_without_it_does_not_fit():
    v = judge("GC005", watched(capacity=int(20.5 * GIB)))  # less the 768 MiB context: 19.75 GiB
    assert v.status == "passed"
    assert v.headline == ("Checkpointing is needed at batch 2: the predicted peak without it, 19.9 GiB, exceeds "
                          "the 19.8 GiB usable")
    assert judge("GC005", watched(capacity=24 * GIB)).status == "fired"


def test_gc005_does_not_judge_a_run_the_memory_model_does_not_describe(h200):
    other = copy.deepcopy(h200)
    for s in other.watch.steps:
        s.phase_peak_bytes = {"backward": int(s.peak_allocated_bytes * 1.25)}  # a wrapper's buffers, say
    v = judge("GC005", other)
    assert v.status == "inconclusive" and "does not describe this step" in v.headline


def test_gc001_and_gc005_keep_their_sweep_reasons_when_there_is_neither():
    f = Facts()
    assert judge("GC001", f).headline.endswith("no sweep.measurements in the facts (its probe did not run)")
    assert judge("GC005", f).status == "inconclusive"


def test_gc020_judges_the_copies_of_a_watched_run_s_profiled_steps():
    """An activation-offloading job, watched: its profiled steps' trace (the hand-made pageable-copy
    device trace of the GC020 tests) under the watch key."""
    from gcdoctor.facts.watch import WatchFacts
    data = Path(__file__).resolve().parent / "data" / "offload-pageable.json"
    facts = Facts(watch=WatchFacts())
    for window, tm in compute_metrics(load_trace(data)).items():
        facts.trace["watch/watch-steps-5-6" if window == "all" else f"watch/watch-steps-5-6|{window}"] = tm
    [v] = evaluate_rule(find_rule("GC020"), facts)
    assert (v.status, v.severity, v.scope, v.topic) == ("fired", "critical", "configuration", "watch")
    assert v.headline == ("watch/watch-steps-5-6: the device stalls on the offload 40% of the step "
                          "(pageable copies)")
    assert "Judged on the watched run's profiled steps" in v.explanation
    clean = Facts(watch=WatchFacts(), trace={"watch/watch-steps-5-6": compute_metrics(
        load_trace(data.with_name("offload-clean.json")))["all"]})
    [v] = evaluate_rule(find_rule("GC020"), clean)
    assert (v.status, v.topic) == ("passed", "watch")
