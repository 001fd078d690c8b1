"""GC010 launch-overhead-bound: on the granularity facts of a real CPU run (samples/granularity),
and on bare traces (`gcdoctor analyze trace.json`)."""
from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest

from gcdoctor.engine import evaluate
from gcdoctor.facts import Facts
from gcdoctor.rules import BY_CODE
from gcdoctor.trace.to_facts import facts_from_trace

REPO = Path(__file__).resolve().parents[1]
CPU_SAMPLE = REPO / "samples" / "granularity" / "cpu-tiny-llama" / "facts.json"
RULE = BY_CODE["GC010"]


def judge(facts: Facts, **overrides: float) -> dict[str, object]:
    verdicts = evaluate(facts, [RULE], overrides={"GC010": overrides} if overrides else None)
    return {v.subject: v for v in verdicts}


@pytest.fixture
def cpu_facts() -> Facts:
    return Facts.load(CPU_SAMPLE)


# -- granularity facts of a real run ---------------------------------------------------------

def test_fires_on_host_bound_synthetic_blocks(cpu_facts):
    v = judge(cpu_facts)["synthetic-small/block"]
    assert (v.status, v.severity) == ("fired", "warning")
    assert "host-side work per checkpoint region" in v.headline
    assert "Use no checkpointing here" in v.recommendation
    assert "torch.compile" in v.recommendation  # host work: graphs alone do not remove it


def test_silent_where_the_extra_time_is_recomputed_math(cpu_facts):
    # h 256: per-block checkpointing adds 54 ms, of which the measured region costs explain 15 ms
    assert "synthetic-large/block" not in judge(cpu_facts)


def test_single_linear_regions_are_pure_overhead(cpu_facts):
    # 28 regions that save and recompute nothing: +25% over none, half of it measured region cost
    v = judge(cpu_facts)["model/fine"]
    assert (v.status, v.severity) == ("fired", "warning")
    assert v.headline.startswith("model/fine: +25% step time over none")
    assert "saves no activation memory and recomputes nothing" in v.explanation
    assert v.recommendation.startswith("Remove these checkpoint regions")


def test_a_variant_saving_nothing_is_reported_even_when_not_overhead_bound(cpu_facts):
    v = judge(cpu_facts, min_explained_share=10.0)["model/fine"]
    assert (v.status, v.severity) == ("fired", "info")
    assert v.headline == "model/fine saves no activation memory and recomputes nothing (+25% step time vs none)"


def test_threshold_override_silences_the_warnings(cpu_facts):
    assert [v for v in judge(cpu_facts).values() if v.severity == "warning"]
    verdicts = judge(cpu_facts, min_explained_share=10.0)
    assert not [v for v in verdicts.values() if v.severity == "warning"]
    assert verdicts["synthetic-small"].status == "passed"


def test_a_busy_device_contradicts_the_overhead_estimate(cpu_facts):
    facts = copy.deepcopy(cpu_facts)
    block = facts.granularity.group("synthetic-small").get("block")
    block.device_idle_share = 0.05  # what a GPU trace of a compute-bound step would say
    verdicts = judge(facts)
    assert judge(cpu_facts)["synthetic-small/block"].severity == "warning"
    assert "synthetic-small/block" not in verdicts  # the device kept busy: the overhead was hidden


def as_if_profiled_on_a_gpu(facts: Facts, short_kernel_share: float) -> Facts:
    """The recorded synthetic-small none/block pair, given the trace metrics and launch cost a
    device run would add (kernels per step, idle, short kernels, graph replay), with the region
    cost zeroed: isolates the launch branch of the rule."""
    facts = copy.deepcopy(facts)
    lc = facts.granularity.launch
    lc.launch_us, lc.graph_replay_us_per_op, lc.region_fixed_us, lc.region_per_op_us = 5.0, 1.0, 0.0, 0.0
    group = facts.granularity.group("synthetic-small")
    for v, kernels in ((group.get("none"), 1000), (group.get("block"), 4000)):
        v.kernels_per_step, v.device_idle_share, v.short_kernel_share = kernels, 0.6, short_kernel_share
    return facts


def test_launch_branch_names_launches_and_what_graphs_would_save(cpu_facts):
    v = judge(as_if_profiled_on_a_gpu(cpu_facts, short_kernel_share=0.8))["synthetic-small/block"]
    assert (v.status, v.severity) == ("fired", "warning")
    assert "kernel launches" in v.headline
    # 3000 extra kernels: 15.0 ms at 5 us per launch, 3.0 ms replayed from a graph at 1 us per op
    assert "CUDA graphs would remove most of it" in v.recommendation
    assert "about 3.0 ms instead of 15.0 ms" in v.recommendation


def test_launch_branch_needs_kernels_shorter_than_their_launches(cpu_facts):
    verdicts = judge(as_if_profiled_on_a_gpu(cpu_facts, short_kernel_share=0.1))
    assert "synthetic-small/block" not in verdicts


def test_without_any_facts_it_is_inconclusive():
    (v,) = evaluate(Facts(), [RULE])
    assert v.status == "inconclusive" and "granularity" in v.headline


# -- a bare trace -----------------------------------------------------------------------------

def launch_bound_trace(path: Path, kernels: int = 20) -> Path:
    """A handmade kineto-style trace of a launch-bound stretch: each aten op (7 us) issues a
    cudaLaunchKernel (5 us) 3 us after the previous kernel (2 us) ended, so the device idles
    waiting on the host and every kernel is shorter than its launch call. To be replaced by a
    recorded H200 trace of the synthetic-small variants when samples/ has one."""
    t0 = 5_000_000_000_000.0
    ev = [{"ph": "M", "name": "process_name", "pid": 100, "tid": 0, "ts": 0.0, "args": {"name": "python"}},
          {"ph": "X", "cat": "user_annotation", "name": "ProfilerStep#0", "pid": 100, "tid": 1, "ts": t0,
           "dur": 10.0 * kernels + 10.0, "args": {"External id": 1}}]
    for i in range(kernels):
        c = 100 + i
        launch = t0 + 10.0 * i
        ev.append({"ph": "X", "cat": "cpu_op", "name": "aten::add_", "pid": 100, "tid": 1, "ts": launch - 1.0,
                   "dur": 7.0})
        ev.append({"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 100, "tid": 1, "ts": launch,
                   "dur": 5.0, "args": {"External id": c, "cbid": 211, "correlation": c}})
        ev.append({"ph": "X", "cat": "kernel", "name": "tiny_add", "pid": 0, "tid": 7, "ts": launch + 6.0, "dur": 2.0,
                   "args": {"External id": c, "device": 0, "stream": 7, "correlation": c}})
    trace = {"schemaVersion": 1, "deviceProperties": [{"id": 0, "name": "NVIDIA H200"}],
             "traceEvents": ev, "traceName": path.name}
    path.write_text(json.dumps(trace))
    return path


def test_bare_trace_of_short_host_paced_kernels_fires(tmp_path):
    facts = facts_from_trace(launch_bound_trace(tmp_path / "launch-bound.json"))
    verdicts = judge(facts)
    assert list(verdicts) == ["trace:all"]
    v = verdicts["trace:all"]
    assert (v.status, v.severity) == ("fired", "warning")
    assert "(kernel launches)" in v.headline  # ops and their launches fill the host's time


def test_bare_trace_with_idle_not_waiting_on_the_host_passes():
    # the trace helper's handmade trace: 38% idle, but only a quarter of it waits on the host
    facts = facts_from_trace(REPO / "tests" / "data" / "handmade-trace.json")
    v = judge(facts)["trace:all"]
    assert v.status == "passed"


def test_cpu_only_trace_is_inconclusive_with_the_reason():
    facts = facts_from_trace(REPO / "samples" / "traces" / "cpu-tiny-llama.json.gz")
    v = judge(facts)["trace:all"]
    assert v.status == "inconclusive" and "no device metrics" in v.headline
