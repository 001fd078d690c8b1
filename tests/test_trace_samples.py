"""Real traces under samples/traces/ (CPU here; device traces are added there by the lead): each
one loads, agrees with an independent exact reading of the same JSON, and keeps the invariants
of every metric. A new sample file is picked up without changing this test."""
from __future__ import annotations

import gzip
import json
import math
from decimal import Decimal
from pathlib import Path

import numpy as np
import pytest

from gcdoctor.trace import compute_metrics, facts_from_trace, load_trace

SAMPLES = Path(__file__).resolve().parents[1] / "samples" / "traces"
TRACES = sorted(p for p in SAMPLES.glob("*.json*") if p.name.endswith((".json", ".json.gz")))
CPU_SAMPLE = SAMPLES / "cpu-tiny-llama.json.gz"


def read_exact(path: Path) -> list[dict]:
    """The events, read whole by the standard library with exact decimal timestamps."""
    raw = path.read_bytes()
    if raw[:2] == b"\x1f\x8b":
        raw = gzip.decompress(raw)
    return json.loads(raw, parse_float=Decimal)["traceEvents"]


def ns(v) -> int:
    return int(Decimal(v) * 1000)


@pytest.fixture(scope="module", params=TRACES, ids=[p.name for p in TRACES])
def sample(request):
    path = request.param
    tables = load_trace(path)
    return path, tables, compute_metrics(tables), read_exact(path)


def test_there_are_samples():
    assert CPU_SAMPLE in TRACES


def test_tables_match_an_exact_independent_reading(sample):
    _, t, _, events = sample
    complete = [e for e in events if e.get("ph") == "X"]
    cpu = sorted(ns(e["ts"]) for e in complete if e.get("cat") == "cpu_op")
    assert t.cpu_ops.start_ns.tolist() == cpu
    dev = sorted((ns(e["ts"]), ns(e["dur"])) for e in complete
                 if e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset"))
    assert list(zip(t.ops.start_ns.tolist(), t.ops.dur_ns.tolist())) == dev
    runtime = [e for e in complete if str(e.get("cat", "")).endswith(("_runtime", "_driver"))]
    assert len(t.runtime) == len(runtime)
    joined = {e["args"]["correlation"] for e in runtime if "correlation" in e.get("args", {})}
    expect_joined = sum(1 for e in complete if e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset")
                        and e.get("args", {}).get("correlation") in joined)
    assert int((t.ops.launch >= 0).sum()) == expect_joined


def test_one_window_per_profiler_step(sample):
    _, _, metrics, events = sample
    steps = {e["name"]: e for e in events if e.get("ph") == "X" and str(e.get("name", "")).startswith("ProfilerStep#")}
    for name, e in steps.items():
        m = metrics[f"step:{name.split('#')[1]}"]
        assert round(m.wall_us * 1000) == ns(e["dur"])


def test_metric_invariants_in_every_window(sample):
    _, t, metrics, events = sample
    n_cpu = sum(1 for e in events if e.get("ph") == "X" and e.get("cat") == "cpu_op")
    assert metrics["all"].cpu_op_count == n_cpu
    for name, m in metrics.items():
        assert m.cpu_busy_us is not None and m.cpu_busy_us >= 0
        if m.busy_us is None:
            assert m.device_unavailable
            continue
        assert math.isclose(m.busy_us + m.idle_us, m.device_window_us, abs_tol=1e-6), name
        assert math.isclose(m.idle_host_wait_us + m.idle_short_gap_us + m.idle_other_us, m.idle_us, abs_tol=1e-6)
        assert 0.0 <= m.busy_share <= 1.0
        assert m.launched_kernel_count <= m.kernel_count
        for s in m.streams:
            assert math.isclose(s.busy_us + s.idle_us, m.device_window_us, abs_tol=1e-6)
            assert s.busy_us <= m.busy_us + 1e-6
        if m.recompute_share is not None:
            assert 0.0 <= m.recompute_share <= 1.0
        if m.copy_overlap_share is not None:
            assert 0.0 <= m.copy_overlap_share <= 1.0


def test_facts_from_every_sample_survive_a_json_round_trip(sample):
    path = sample[0]
    facts = facts_from_trace(path)
    again = type(facts).from_dict(json.loads(json.dumps(facts.to_dict())))
    assert again.to_dict() == facts.to_dict()
    assert set(facts.trace) == set(sample[2])


def test_cpu_sample_windows_and_labels():
    t = load_trace(CPU_SAMPLE)
    m = compute_metrics(t)
    assert list(m) == ["all", "steady", "step:1", "step:2", "forward", "loss", "backward", "recompute", "optimizer",
                       "ckpt-forward"]
    # 2 checkpointed layers x 2 steps: 4 recompute ranges and 4 checkpointed forwards
    assert (m["recompute"].range_count, m["ckpt-forward"].range_count, m["forward"].range_count) == (4, 4, 2)
    for w in m.values():
        assert w.device_unavailable == "the trace has no device events (a CPU-only profile)"
        assert w.busy_us is None and w.kernel_count is None
    # every recompute happens during backward
    assert m["recompute"].wall_us < m["backward"].wall_us
    assert np.all(np.diff(t.cpu_ops.start_ns) >= 0)
