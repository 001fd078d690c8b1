"""The memory model against the real H200 run in samples/h200-llama3-8b-diagnose (Llama-3-8B,
bf16, seq 4096, AdamW, no GC and GC): every measured peak predicted within 5% (in fact to the
MiB), and the largest batch each way predicted exactly from the device memory the run saw.
The fragmentation margin and context are calibrated on this very run (gcdoctor/memory.py),
so the largest-batch checks guard the calibration; the peak checks are independent of it."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from gcdoctor import memory as M
from gcdoctor.facts import Facts
from gcdoctor.models import load_spec
from gcdoctor.plan import run_plan

SAMPLE = Path(__file__).resolve().parent.parent / "samples" / "h200-llama3-8b-diagnose" / "facts.json"


@pytest.fixture(scope="module")
def run():
    facts = Facts.from_dict(json.loads(SAMPLE.read_text()))
    return facts, load_spec(facts.model.name)


def _workload(facts, m) -> M.Workload:
    s = facts.settings
    return M.Workload(m.batch_size, m.seq_len, s.dtype, s.optimizer, m.variant == "gc", "cuda")


def test_every_measured_peak_is_predicted_within_5_percent(run):
    facts, spec = run
    measured = [m for m in facts.sweep.measurements if m.peak_allocated_bytes]
    assert len(measured) == 8  # no GC 1, 2; GC 1, 2, 4, 8, 10, 11
    for m in measured:
        predicted = M.predict(spec, _workload(facts, m)).peak_bytes
        err = abs(predicted - m.peak_allocated_bytes) / m.peak_allocated_bytes
        assert err < 0.05, (m.variant, m.batch_size, err)
        # in fact to the MiB (the model misses 32-33 KiB of small CUDA-side tensors)
        assert abs(predicted - m.peak_allocated_bytes) < M.MiB, (m.variant, m.batch_size)


def test_the_largest_batch_each_way_is_predicted_from_the_runs_device_memory(run):
    facts, spec = run
    points = [(m.variant, m.batch_size) for m in facts.sweep.measurements]
    mm = M.memory_model_facts(spec, facts.settings.seq_len, facts.settings.dtype, facts.settings.optimizer,
                              "cuda", points, capacity_bytes=facts.environment.total_memory_bytes)
    assert facts.sweep.max_batch == {"no_gc": 2, "gc": 11}
    assert mm.max_batch == facts.sweep.max_batch


def test_each_point_that_ran_out_of_memory_is_predicted_not_to_fit(run):
    facts, spec = run
    usable = M.usable_bytes(facts.environment.total_memory_bytes)
    for m in facts.sweep.measurements:
        predicted = M.predict(spec, _workload(facts, m)).peak_bytes
        assert (predicted <= usable) == m.fits, (m.variant, m.batch_size, predicted, usable)


@pytest.mark.parametrize("device_memory", ["143771MiB", "150109880320"])  # NVML's total, torch's
def test_plan_says_2_and_11_for_the_h200(device_memory):
    _, data = run_plan("llama3-8b", device_memory, as_json=True)
    assert (data["max_batch_no_gc"], data["max_batch_gc"]) == (2, 11)


@pytest.mark.parametrize("fraction,expected", [
    (0.02, {"no_gc": 2, "gc": 13}),  # the old 2% (with the old 512 MiB context: 3 and 13)
    (0.05, {"no_gc": 2, "gc": 12}),  # Lightning's 5% is still too little here
    (0.074, {"no_gc": 2, "gc": 11}),  # the calibrated range's lower end (7.3%, exclusive) ...
    (0.123, {"no_gc": 2, "gc": 11}),  # ... and its upper end (12.3%)
    (0.13, {"no_gc": 2, "gc": 10}),
])
def test_the_margin_range_that_reproduces_the_run(run, monkeypatch, fraction, expected):
    facts, spec = run
    monkeypatch.setattr(M, "FRAGMENTATION_FRACTION", fraction)
    usable = M.usable_bytes(facts.environment.total_memory_bytes)
    got = {v: M.max_batch(spec, usable, facts.settings.seq_len, gc=v == "gc") for v in ("no_gc", "gc")}
    assert got == expected
