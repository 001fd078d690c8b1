"""Memory-model facts: what the session stores per measured point and what rules read."""
from __future__ import annotations

import subprocess
import sys

from gcdoctor.model import fitting as F

from gcdoctor.model import memory as M

from gcdoctor.probes import _memory_model as P
from gcdoctor.facts import Facts
from gcdoctor.facts.memory import (MemoryModelFacts, PredictedPoint, predicted_activation_saving,
                                   predicted_peak_saving, prediction_error_pct)
from gcdoctor.model.registry import load_spec

H200_BYTES = 150754820096  # NVML total of an H200 (143771 MiB; torch reports 615 MiB less)


def test_facts_hold_a_prediction_per_point_and_the_largest_batches():
    spec = load_spec("llama3-8b")
    mm = F.memory_model_facts(spec, 4096, points=[("no_gc", 1), ("gc", 1), ("gc", 8)], capacity_bytes=H200_BYTES)
    assert [(p.variant, p.batch_size) for p in mm.points] == [("no_gc", 1), ("gc", 1), ("gc", 8)]
    assert mm.max_batch_allocated == {"no_gc": M.max_batch(spec, mm.usable_bytes, 4096),
                                      "gc": M.max_batch(spec, mm.usable_bytes, 4096, gc=True)}
    assert mm.max_batch == mm.max_batch_by_allocator["default"]
    for alloc in ("default", "expandable"):
        for variant, best in mm.max_batch_by_allocator[alloc].items():
            assert best <= mm.max_batch_allocated[variant]
            assert F.fit(spec, M.Workload(best, 4096, gc=variant == "gc"), H200_BYTES, alloc).fits
    assert mm.usable_bytes == H200_BYTES - M.DEVICE_CONTEXT_BYTES and "assumed" in mm.context_source
    assert all(p.fits is not None and p.fits_expandable is not None for p in mm.points)
    direct = M.predict(spec, M.Workload(8, 4096, gc=True))
    assert mm.predicted_peak("gc", 8) == direct.peak_bytes
    assert mm.get("gc", 8).peak_where == "loss backward"
    assert mm.layer_activation_bytes_per_token == 200840  # docs/references.md §1: 784.53 MiB at seq 4096


def test_facts_survive_a_round_trip_through_json():
    mm = F.memory_model_facts(load_spec("tiny-llama"), 128, points=[("no_gc", 2), ("gc", 2)], capacity_bytes=2 ** 30)
    back = Facts.from_dict(Facts(memory_model=mm).to_dict()).memory_model
    assert back == mm


def test_activation_saving_is_no_gc_minus_gc_after_forward():
    mm = MemoryModelFacts(points=[
        PredictedPoint(variant="no_gc", batch_size=2, activations_after_forward_bytes=900, peak_bytes=5000),
        PredictedPoint(variant="gc", batch_size=2, activations_after_forward_bytes=100, peak_bytes=4600),
    ])
    assert predicted_activation_saving(mm, 2) == 800
    assert predicted_peak_saving(mm, 2) == 400
    assert predicted_activation_saving(mm, 4) is None
    assert predicted_activation_saving(None, 2) is None


def test_prediction_error_is_relative_to_the_measurement():
    assert prediction_error_pct(105, 100) == 5.0
    assert prediction_error_pct(None, 100) is None
    assert prediction_error_pct(100, 0) is None


def test_memory_model_and_plan_import_without_torch():
    code = ("import sys, gcdoctor.model.memory, gcdoctor.model.plan, gcdoctor.facts.memory; "
            "assert 'torch' not in sys.modules, 'torch imported'")
    subprocess.run([sys.executable, "-c", code], check=True)


def test_activation_saving_pct_is_defined_like_the_measured_one():
    mm = MemoryModelFacts(param_bytes=100, grad_bytes=100, optimizer_state_bytes=200, points=[
        PredictedPoint(variant="no_gc", batch_size=1, peak_bytes=1400),
        PredictedPoint(variant="gc", batch_size=1, peak_bytes=650),
    ])
    assert mm.predicted_activation_peak("gc", 1) == 250
    assert mm.predicted_activation_saving_pct(1) == 75.0
    assert mm.predicted_activation_saving_pct(2) is None


def test_the_context_read_after_the_steps_replaces_the_assumed_one():
    from types import SimpleNamespace
    spec = load_spec("llama3-8b")
    reading = {"v": 300 * M.MiB}  # before any step: the kernels are not loaded yet

    class Backend:
        kind = "cuda"

        def non_allocator_bytes(self):
            return reading["v"]

        def total_memory(self):
            return 150109880320

        def memory_limit(self):
            return None

    ctx = SimpleNamespace(backend=Backend(), spec=spec, dtype="bf16", seq_len=4096, facts=Facts(),
                          config=SimpleNamespace(optimizer="adamw", probe_batch=1), probe_spec=lambda: spec)
    mm = P.memory_model_facts_for(ctx)
    assert mm.context_bytes == M.DEVICE_CONTEXT_BYTES and "300 MiB measured here before any step" in mm.context_source
    ctx.facts.memory_model = mm
    mm.points.append(F.predicted_point_for(spec, mm, "gc", 11))
    reading["v"] = 780 * M.MiB  # after the steps: within 32 MiB of the default, kept and said
    assert not P.refresh_context(ctx) and "780 MiB measured after the sweep's steps" in mm.context_source
    reading["v"] = 4 * 2**30  # another process holds 3 GiB more: predicted again
    assert P.refresh_context(ctx)
    new = ctx.facts.memory_model
    assert new.context_bytes == 4 * 2**30 and new.context_source.startswith("measured on this device after")
    assert [(p.variant, p.batch_size) for p in new.points] == [("gc", 11)]
    assert new.max_batch_by_allocator["expandable"]["gc"] < mm.max_batch_by_allocator["expandable"]["gc"]
