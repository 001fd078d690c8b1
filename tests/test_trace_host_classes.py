"""Other people's traces, judged right or "too little to judge": one small trace per class of
failure, with its truth beside it (samples/traces/host-causes, written by tests/kineto_synth.py),
and the vendor/version spellings the classification relies on."""
from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

import pytest

from gcdoctor.cli import main
from gcdoctor.engine import evaluate
from gcdoctor.facts.trace import IDLE_CAUSES
from gcdoctor.report.sections.trace import _row
from gcdoctor.trace import facts_from_trace
from gcdoctor.trace.hostidle import RT_ENQUEUE, RT_LAUNCH, RT_OTHER, RT_SETUP, RT_SYNC, runtime_class


def _helper():
    spec = importlib.util.spec_from_file_location("kineto_synth", Path(__file__).with_name("kineto_synth.py"))
    mod = importlib.util.module_from_spec(spec)
    sys.modules["kineto_synth"] = mod
    spec.loader.exec_module(mod)
    return mod


kineto_synth = _helper()
REPO = Path(__file__).resolve().parents[1]
SAMPLES = REPO / "samples" / "traces" / "host-causes"
NAMES = sorted(kineto_synth.SAMPLES)


def truth(name: str) -> dict:
    return json.loads((SAMPLES / f"{name}.truth.json").read_text())


def judged(name: str):
    facts = facts_from_trace(SAMPLES / f"{name}.json.gz")
    return facts, {v.code: v for v in evaluate(facts) if v.status == "fired"}


def test_the_samples_are_what_the_generator_writes(tmp_path):
    kineto_synth.write_all(tmp_path)
    for p in sorted(tmp_path.rglob("*")):
        if p.is_file():
            assert p.read_bytes() == (SAMPLES / p.relative_to(tmp_path)).read_bytes(), p.name


@pytest.mark.parametrize("name", NAMES)
def test_each_class_gets_its_truth(name):
    want = truth(name)
    facts, fired = judged(name)
    assert set(want["fires"]) <= set(fired), (name, sorted(fired))
    assert not set(want["silent"]) & set(fired), (name, sorted(fired))
    for code, words in want.get("headline", {}).items():
        assert words in fired[code].headline, fired[code].headline
    for code, severity in want.get("severity", {}).items():
        assert fired[code].severity == severity
    h = (facts.trace.get("steady") or facts.trace["all"]).host_idle
    for cause, (lo, hi) in want.get("shares", {}).items():
        assert lo <= getattr(h, f"{cause}_us") / h.window_us <= hi, cause
    if "steps" in want:
        assert facts.trace["all"].steady_steps == want["steps"]
    if "window_ms" in want:
        lo, hi = want["window_ms"]
        assert lo <= h.window_us / 1e3 <= hi
    if "no_advice" in want:
        assert not any(want["no_advice"] in v.recommendation for v in fired.values())
    assert sum(getattr(h, f"{c}_us") for c in IDLE_CAUSES) == pytest.approx(h.idle_us, abs=1e-3)


@pytest.mark.parametrize("name", NAMES)
def test_host_verdict_evidence_agrees_with_its_headline(name):
    """One busy figure: every host verdict's busy share is the report's, and its idle share is 100 - busy."""
    facts, fired = judged(name)
    key = "steady" if "steady" in facts.trace else "all"
    row_busy = _row(key, facts.trace[key])[3]
    for v in fired.values():
        ev = {e.label: e.value for e in v.evidence}
        if "device busy, share of the same window" in ev:
            assert ev["device busy, share of the same window"] == pytest.approx(100 * row_busy)
            assert ev["device idle, all causes, share of the window"] == pytest.approx(100 - 100 * row_busy)


def test_a_sync_owns_only_the_time_the_host_is_inside_it():
    """Class 1: 20 ms of work, torch.cuda.synchronize(), 60 ms of Python: Python, not sync."""
    facts, fired = judged("sync-then-python")
    h = facts.trace["steady"].host_idle
    assert h.sync_us < 0.001 * h.window_us and h.python_us == pytest.approx(3 * 60_000, rel=1e-3)
    assert h.after_sync_us == pytest.approx(3 * 60_000, rel=1e-3)
    assert h.sync_exposed_us == h.sync_us  # the 60 ms exceed the device's 20 ms: nothing to hide
    assert fired["GC025"].severity == "critical"


def test_too_little_device_work_is_said_and_judges_nothing():
    for name, why in (("one-kernel-step", "3 device op(s)"), ("unjoined", "17 of 18 device ops without a launch")):
        facts, fired = judged(name)
        assert list(fired) == ["GC026"] and fired["GC026"].severity == "warning"
        assert why in {e.label: e.value for e in fired["GC026"].evidence}["why"]
        for v in evaluate(facts):
            if v.code in ("GC021", "GC022", "GC023", "GC024", "GC025", "GC028", "GC029"):
                assert v.status == "inconclusive" and "too little device work" in v.headline


def test_another_process_steps_bound_nothing():
    facts, _ = judged("other-process-steps")
    assert facts.trace["all"].steady_steps == [] and "step:0" not in facts.trace


def test_a_one_off_is_not_dispatch():
    facts, fired = judged("first-launch-oneoff")
    h = facts.trace["all"].host_idle
    assert h.largest_gap_cause == "dispatch" and h.largest_gap_what == "cudaLaunchKernel"
    assert h.largest_gap_us == pytest.approx(1410 + 5 - 4, abs=30)
    (v,) = [v for v in evaluate(facts) if v.code == "GC021"]
    assert v.status == "passed" and "a one-off" in v.headline


def test_the_window_of_a_trace_without_steps_is_the_hosts_span():
    facts, fired = judged("init-then-work")
    h = facts.trace["all"].host_idle
    assert h.largest_gap_us == pytest.approx(600_000, rel=1e-3) and h.largest_gap_cause == "python"
    assert "600.0 ms gap" in fired["GC028"].headline


def test_exposed_communication_from_the_traces_alone_per_rank(tmp_path):
    assert main(["analyze", str(SAMPLES / "ddp"), "--out", str(tmp_path / "out")]) == 0
    verdicts = json.loads((tmp_path / "out" / "report.json").read_text())["verdicts"]
    fired = {(v["code"], v["subject"]) for v in verdicts if v["status"] == "fired"}
    want = json.loads((SAMPLES / "ddp.truth.json").read_text())["fires"]
    for subject, codes in want.items():
        assert {c for c, s in fired if s == subject} >= set(codes), subject
    assert ("GC061", "rank/1") not in fired  # rank 1 arrives last: its all-reduce barely waits
    v = next(v for v in verdicts if v["code"] == "GC061" and v["subject"] == "rank/0")
    assert "of the step is communication no compute hides" in v["headline"]


def test_a_bare_trace_of_one_rank_judges_its_exposed_communication():
    facts = facts_from_trace(SAMPLES / "ddp" / "rank-0.json.gz")
    (v,) = [v for v in evaluate(facts) if v.code == "GC061"]
    assert v.status == "fired"
    h = facts.trace["steady"].host_idle
    assert h.comm_exposed_us == pytest.approx(h.comm_us) and 0.6 < h.comm_exposed_us / h.window_us < 0.7


def test_a_blocking_copy_is_a_sync_and_graph_replay_gets_no_graph_advice():
    facts, fired = judged("graph-blocking-copy")
    h = facts.trace["steady"].host_idle
    assert h.graph_launch_count == 3 and h.dispatch_us < 0.01 * h.window_us
    assert "hipMemcpyWithStream" in h.sync_calls
    assert "pinned memory" in fired["GC022"].recommendation


@pytest.mark.parametrize("name, cls", [
    ("cudaLaunchKernel", RT_LAUNCH), ("cuLaunchKernel", RT_LAUNCH), ("cudaLaunchKernelExC_v11060", RT_LAUNCH),
    ("hipLaunchKernel", RT_LAUNCH), ("hipModuleLaunchKernel", RT_LAUNCH), ("hipExtModuleLaunchKernel", RT_LAUNCH),
    ("hipHccModuleLaunchKernel", RT_LAUNCH), ("hipExtLaunchKernel", RT_LAUNCH), ("cudaGraphLaunch", RT_LAUNCH),
    ("hipGraphLaunch", RT_LAUNCH), ("cudaMemcpyAsync", RT_LAUNCH), ("hipMemcpyAsync", RT_LAUNCH),
    ("cuMemcpyHtoDAsync_v2", RT_LAUNCH), ("hipMemsetAsync", RT_LAUNCH), ("musaLaunchKernel", RT_LAUNCH),
    ("cudaMemcpy", RT_SYNC), ("hipMemcpy", RT_SYNC), ("hipMemcpyWithStream", RT_SYNC), ("cuMemcpyDtoH_v2", RT_SYNC),
    ("cudaStreamSynchronize", RT_SYNC), ("hipDeviceSynchronize", RT_SYNC), ("cuEventSynchronize", RT_SYNC),
    ("cudaMalloc", RT_SETUP), ("hipFree", RT_SETUP), ("hipModuleLoadData", RT_SETUP), ("cuModuleGetFunction", RT_SETUP),
    ("cuLibraryLoadData", RT_SETUP), ("hipHostMalloc", RT_SETUP), ("cudaStreamCreateWithPriority", RT_SETUP),
    ("cudaEventRecord", RT_ENQUEUE), ("hipStreamWaitEvent", RT_ENQUEUE), ("cudaStreamQuery", RT_OTHER),
    ("cudaGetLastError", RT_OTHER), ("hipEventQuery", RT_OTHER),
])
def test_runtime_calls_of_both_vendors(name, cls):
    assert runtime_class(name) == cls
