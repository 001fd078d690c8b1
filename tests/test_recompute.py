"""Recompute found without labels (gcdoctor.trace.recompute) on real traces of the checkpointing
people run: transformers' (reentrant and not), FSDP's checkpoint_wrapper, the composable
checkpoint, DeepSpeed's, a user's own torch.utils.checkpoint, and two that do not recompute.
The CPU traces are bench/record_recompute_traces.py's (2 decoder layers, 2 profiled steps)."""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from gcdoctor.trace import compute_metrics, facts_from_trace, load_trace
from gcdoctor.trace import windows as trace_windows
from gcdoctor.trace.recompute import METHOD_NAMES, METHOD_SEQUENCE, find_recompute, recompute_host_intervals

SAMPLES = Path(__file__).resolve().parents[1] / "samples"
REC = SAMPLES / "traces" / "recompute"
H200_LABELLED = SAMPLES / "traces" / "h200-llama3-8b-2layers-gc.json.gz"
H200_TRAINER = SAMPLES / "watch" / "h200-llama3-8b-4layers-trainer" / "traces" / "watch-steps-5-6.json.gz"


def _unlabelled(monkeypatch) -> None:
    """Read traces as if gcdoctor's recompute labels were not there."""
    orig = trace_windows.WindowFinder.labels
    monkeypatch.setattr(trace_windows.WindowFinder, "labels",
                        lambda self: [w for w in orig(self) if not w.name.startswith("recompute")])


@pytest.mark.parametrize("form, kind, host, ops", [
    ("hf-non-reentrant", "non-reentrant", "MmBackward0", 384),
    ("hf-reentrant", "reentrant", "CheckpointFunctionBackward", 392),
    ("fsdp-checkpoint-wrapper", "non-reentrant", "MmBackward0", 384),
    ("composable", "non-reentrant", "MmBackward0", 384),
    ("deepspeed", "reentrant", "CheckpointFunctionBackward", 392),
    ("own-loop", "non-reentrant", "AddmmBackward0", 48),
])
def test_every_checkpointing_form_is_found_one_region_per_layer_and_step(form, kind, host, ops):
    t = load_trace(REC / f"cpu-{form}.json.gz")
    f = find_recompute(t)
    assert (f.regions, f.kind, f.method, f.host_nodes, f.op_count) == (4, kind, METHOD_SEQUENCE, {host: 4}, ops)
    # a region lies in its own step's backward: two per profiled step
    steps = t.profiler_steps()
    per_step = [sum(1 for a in f.host0 if s <= a < e) for s, e in steps.values()]
    assert per_step == [2, 2]
    m = compute_metrics(t)
    assert m["recompute"].window_source == "recompute_inferred"
    assert m["recompute"].range_count == 4


@pytest.mark.parametrize("form", ["none", "double-backward"])
def test_traces_that_recompute_nothing_have_no_recompute_window(form):
    t = load_trace(REC / f"cpu-{form}.json.gz")
    assert find_recompute(t) is None
    assert recompute_host_intervals(t) is None
    assert "recompute" not in compute_metrics(t)


def test_on_the_labelled_cpu_trace_each_region_found_lies_inside_its_label_and_the_share_agrees():
    t = load_trace(REC / "cpu-labelled.json.gz")
    f = find_recompute(t)
    names = np.asarray(t.names, dtype=object)[t.ranges.name_id]
    lab = np.flatnonzero(np.char.startswith(names.astype(str), "gcdoctor/recompute/"))
    l0, l1 = t.ranges.start_ns[lab], t.ranges.start_ns[lab] + t.ranges.dur_ns[lab]
    assert len(lab) == f.regions == 4
    assert ((l0 <= f.host0) & (f.host1 <= l1)).all()  # the label also covers the RNG restore around it
    wall = sum(e - s for s, e in t.profiler_steps().values())
    labelled_pct, found_pct = 100 * (l1 - l0).sum() / wall, 100 * f.host_ns / wall
    assert round(labelled_pct, 2) == 20.45 and round(found_pct, 2) == 19.74  # on the CPU, op time is host time
    assert abs(labelled_pct - found_pct) < 2.0


def test_on_the_h200_labelled_trace_the_unlabelled_device_share_equals_the_labelled_one(monkeypatch):
    t = load_trace(H200_LABELLED)
    labelled = compute_metrics(t)["all"]
    _unlabelled(monkeypatch)
    m = compute_metrics(t)
    assert m["recompute"].window_source == "recompute_inferred"
    assert m["all"].recompute_busy_us == labelled.recompute_busy_us == 23378.436
    assert round(m["all"].recompute_share, 4) == round(labelled.recompute_share, 4) == 0.095


def test_the_h200_trainer_trace_with_transformers_checkpointing_gets_a_recompute_share():
    f = find_recompute(load_trace(H200_TRAINER))
    assert (f.regions, f.kind, f.host_nodes) == (8, "non-reentrant", {"MmBackward0": 8})  # 4 layers x 2 steps
    facts = facts_from_trace(H200_TRAINER)
    assert round(facts.trace["all"].recompute_share, 3) == 0.122
    assert "trace.all.recompute_share" not in facts.unavailable


def test_without_sequence_numbers_regions_come_from_forward_op_names_inside_the_found_ones():
    t = load_trace(REC / "cpu-hf-non-reentrant.json.gz")
    exact = find_recompute(t)
    t.cpu_ops.seq = np.full(len(t.cpu_ops), -1, dtype=np.int64)  # a trace written without them
    f = find_recompute(t)
    assert (f.method, f.regions, f.kind) == (METHOD_NAMES, 4, "non-reentrant")
    assert ((exact.host0 <= f.host0) & (f.host1 <= exact.host1)).all()
    assert f.host_ns > 0.8 * exact.host_ns
    assert "no autograd sequence numbers" in f.describe()
