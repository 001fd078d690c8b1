"""The allocator replay against fresh processes on the H200 (bench/gpu/wave3_memory.sh part C,
samples/h200-memory-w3/fresh): Qwen2.5-7B at seq 2048, a model and length the replay was not
calibrated on. Each boundary is re-predicted here from the spec and the device's recorded memory
and checked against the batches measured to fit and not to fit in fresh processes."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from gcdoctor.model import fitting as F
from gcdoctor.model.registry import load_spec

FRESH = Path(__file__).resolve().parents[1] / "samples" / "h200-memory-w3" / "fresh" / "fresh_check.json"


@pytest.fixture(scope="module")
def recorded():
    return json.loads(FRESH.read_text())


@pytest.mark.parametrize("variant", ["no_gc", "gc"])
@pytest.mark.parametrize("allocator", ["default", "expandable"])
def test_the_replay_predicts_the_measured_fresh_boundary(recorded, variant, allocator):
    rows = [r for r in recorded["rows"] if r["variant"] == variant and r["allocator"] == allocator]
    fits = max(r["batch_size"] for r in rows if r["fits"])
    fails = min(r["batch_size"] for r in rows if not r["fits"])
    assert fails == fits + 1  # measured on both sides
    spec = load_spec(recorded["model"])
    predicted = F.max_batch_fresh(spec, recorded["device_memory_bytes"], recorded["seq_len"], "bf16", "adamw",
                                  variant == "gc", "cuda", allocator, recorded["context_bytes_assumed"])
    assert predicted == fits
